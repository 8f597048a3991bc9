"""What a whole model's training step holds at its peak, eager against
fused, compiled or not (bench/whole.py's models): per contender, the peak
above the step's start, the allocation that reached it and where it was
made, and the allocations made during the step that are live at the peak;
then the sizes live at one contender's peak and not at the other's.

    python bench/diag/peak_allocations.py --case whole_vit [--compiled] [--contenders eager fused] [--cpp]

--cpp records C++ frames too (slower) and names, for each allocation
below, the frames of this extension that made it.
"""

import argparse
import collections
import copy
import linecache
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import compiled as compiled_  # noqa: E402
import whole  # noqa: E402

CONTENDERS = {"eager": lambda case, model: model, "fused": whole.fuse}


def where(frames, depth=3):
    """The innermost frames outside torch's own Python: where a tensor was
    asked for, the innermost with its source line (a generated graph's
    line names the operator it calls); and this extension's C++ frames."""
    py = [f for f in frames if f["filename"].endswith(".py")]
    own = [f for f in py if "/torch/" not in f["filename"] or "/_inductor/" in f["filename"]] or py
    text = " <- ".join(f"{os.path.basename(f['filename'])}:{f['line']} {f['name']}" for f in own[:depth])
    if own:
        text += f" [{linecache.getline(own[0]['filename'], own[0]['line']).strip()[:120]}]"
    cpp = [f["name"].split("(")[0][-60:] for f in frames if "gemm_act::" in f["name"]][:3]
    return text + (" {" + " <- ".join(cpp) + "}" if cpp else "")


def peak_of(trace):
    """(the peak above the start, the index of the event that reached it, the
    allocations made before it and still live there) over one device's trace."""
    live, total, peak, at, live_at_peak = {}, 0, 0, -1, {}
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            live[e["addr"]] = e
            total += e["size"]
            if total > peak:
                peak, at, live_at_peak = total, i, dict(live)
        elif e["action"] == "free_completed":
            total -= e["size"]
            live.pop(e["addr"], None)
    return peak, at, list(live_at_peak.values())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", default="whole_vit", choices=sorted(whole.WHOLE))
    p.add_argument("--compiled", action="store_true")
    p.add_argument("--contenders", nargs=2, default=["eager", "fused"], choices=sorted(CONTENDERS))
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--cpp", action="store_true", help="C++ frames too")
    args = p.parse_args()
    built = whole.build(args.case, "cuda", False)
    print(f"=== {args.case} training{' compiled' if args.compiled else ''}, {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}")
    live_sizes = {}
    for name in args.contenders:
        model = CONTENDERS[name](args.case, copy.deepcopy(built.model))
        if args.compiled:
            model = torch.compile(compiled_.own_frame(model, name))
        run = whole.step_fn(model, built, "training")
        for _ in range(3):  # compiles, then warms
            out = run()
            del out
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="all" if args.cpp else "python")
        out = run()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        del out
        trace = snap["device_traces"][torch.cuda.current_device()]
        peak, at, live = peak_of(trace)
        print(f"--- {name}: peak {torch.cuda.max_memory_allocated() - start} bytes above the start "
              f"(the trace's: {peak}); {sum(e['action'] == 'alloc' for e in trace)} allocations in the step")
        if at >= 0:
            e = trace[at]
            print(f"  reached by an allocation of {e['size']} bytes at {where(e['frames'], 6)}")
            before = [b for b in trace[:at] if b["action"] in ("alloc", "free_completed")][-6:]
            for b in before:
                print(f"    before it: {b['action']} {b['size']} at {where(b['frames'], 1)[:300]}")
        print(f"  live at the peak, made in the step: {len(live)} allocations, {sum(e['size'] for e in live)} "
              "bytes; the largest kinds:")
        sizes = collections.Counter(e["size"] for e in live)
        places = {e["size"]: where(e["frames"], 3) for e in live}  # one place a size: the last made
        for size, count in sorted(sizes.items(), key=lambda kv: -kv[0] * kv[1])[:args.top]:
            print(f"  {count:4d} x {size:>12d}  e.g. {places[size][:400]}")
        live_sizes[name] = (sizes, places)
        del run, model
        torch.cuda.empty_cache()
    a, b = args.contenders
    for first, second in ((a, b), (b, a)):
        extra = live_sizes[second][0] - live_sizes[first][0]
        print(f"+++ live at {second}'s peak and not at {first}'s: {sum(s * c for s, c in extra.items())} bytes")
        for size, count in sorted(extra.items(), key=lambda kv: -kv[0] * kv[1])[:args.top]:
            print(f"  {count:4d} x {size:>12d}  {live_sizes[second][1][size][:400]}")


if __name__ == "__main__":
    main()
