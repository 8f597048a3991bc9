"""fuse_linear_act: swap nn.Linear -> activation pairs in nn.Sequential for LinearAct."""

from torch import nn

from .activations import from_module
from .modules import LinearAct


def fuse_linear_act(model):
    """Fuses, in place, every nn.Linear directly followed by a supported
    activation inside an nn.Sequential into one LinearAct that shares the
    Linear's parameters; the activation's slot becomes nn.Identity so indices
    and state_dict keys stay as they were. Returns ``model``."""
    for container in list(model.modules()):
        if not isinstance(container, nn.Sequential):
            continue
        names = list(container._modules.keys())
        for first, second in zip(names, names[1:]):
            linear, act_module = container._modules[first], container._modules[second]
            act = from_module(act_module)
            if type(linear) is not nn.Linear or act is None:
                continue
            name, slope = act
            container._modules[first] = LinearAct.from_linear(linear, name, slope)
            container._modules[second] = nn.Identity()
    return model
