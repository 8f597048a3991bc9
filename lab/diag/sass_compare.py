"""Whether two builds' kernels are the same machine code: disassembles the
objects (cuobjdump -sass) and matches every kernel of NEW to one of OLD with
the identical instruction sequence (immediates and branch offsets included),
whatever the kernels are named.

    python lab/diag/sass_compare.py --old OLD.o ... --new NEW.o ...
"""

import argparse
import re
import subprocess


def kernels(paths):
    out = {}
    for path in paths:
        text = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True, check=True).stdout
        name = None
        for line in text.splitlines():
            m = re.match(r"\s+Function : (\S+)", line)
            if m:
                name = m.group(1)
                out[name] = []
            elif name:
                m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(.*?);", line)
                if m:
                    out[name].append(m.group(1))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", nargs="+", required=True)
    p.add_argument("--new", nargs="+", required=True)
    args = p.parse_args()
    old, new = kernels(args.old), kernels(args.new)
    seen = {tuple(v) for v in old.values()}
    differ = [k for k, v in new.items() if tuple(v) not in seen]
    print(f"{len(old)} kernels in the old objects, {len(new)} in the new; "
          f"{len(new) - len(differ)} of the new are instruction for instruction an old one")
    for k in differ:
        print("differs:", k)


if __name__ == "__main__":
    main()
