"""What the tensor-core families' table generators (cuda/<family>/
<family>_kernels.py) share: writing generated files so that one whose text
is unchanged keeps its time, and a build recompiles nothing for it."""

import os


def write(path, text):
    """Writes `text` unless the file already holds it."""
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def write_units(kernels_dir, units):
    """Writes {file name: text} into kernels_dir and removes any other file
    there (a unit whose row left the table); returns the paths."""
    paths = []
    for name, text in units.items():
        paths.append(os.path.join(kernels_dir, name))
        write(paths[-1], text)
    for stale in set(os.listdir(kernels_dir)) - set(units):
        os.remove(os.path.join(kernels_dir, stale))
    return paths
