import faulthandler, torch, torch_gemm_act as tga
faulthandler.enable()
a, b = torch.randn(4, 5), torch.randn(6, 3)
for name, fn in [("direct", lambda: torch.ops.gemm_act.gemm_act(a, b, None, None, "none", 1.0, 0.0, 0.01, False)),
                 ("unknown_act", lambda: torch.ops.gemm_act.gemm_act(a, torch.randn(5, 3), None, None, "swish", 1.0, 0.0, 0.01, False))]:
    try:
        fn(); print(name, "no error?!")
    except Exception as e:
        print(name, type(e).__name__, str(e)[:100], flush=True)
