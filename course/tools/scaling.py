"""How an epoch's cost grows with the batch: `python -m course.tools.scaling [--quick] [--out FILE]`.

One epoch of the 784-128-10 MLP (SGD, lr 0.1) at each batch size through course_plain, course_plain_graph,
course_fused (its X staged 64 rows at a time), pytorch_eager and pytorch_graph (notebook 08's benchmark rows, course.tools.bench),
the median of the epochs after a warm-up one; and the compute floor: an epoch's floating-point work at batch 64
(course.perf.epoch_cost, notebook 08 section 3: the forward pass, dW1, dW2 and dH, the update) at the FP32 peak of an
H100 or H200 (notebook 08's floor), which no batch size can beat.
"""
import sys
import time
from pathlib import Path

BATCHES = (32, 64, 128, 256, 512, 1024, 2048, 4096)
EPOCHS = 3                 # 1 warm-up + 2 timed
FP32_PEAK_TFLOPS = 67.0   # H100 and H200 (SXM): FP32 without tensor cores, the peak notebook 08 prices an epoch at


def flops_per_epoch(n_images, n_in=784, hidden=128, n_out=10, batch_size=64):
    """An epoch's FLOPs as notebook 08 section 3 counts them (course.perf.epoch_cost: no gradient for the images)."""
    from course.perf import epoch_cost
    return epoch_cost(n_images, n_in, hidden, n_out, batch_size)[0]


def measure(data, cfg, init, batch, impls):
    """{impl: epoch seconds or None} at one batch size."""
    from course.tools import bench
    c = dict(cfg, batch_size=batch, epochs=EPOCHS)
    runs = {"course_plain": lambda: bench.bench_plain(data, c),
            "course_plain_graph": lambda: bench.bench_graph(data, c, "plain"),
            "course_fused": lambda: bench.bench_fused(data, c, "epoch"),
            "pytorch_eager": lambda: bench.bench_torch(data, c, init),
            "pytorch_graph": lambda: bench.bench_torch_graph(data, c, init)}
    out = {}
    for impl in impls:
        try:
            out[impl] = runs[impl]().get("epoch_s")
        except Exception as e:  # one failing row must not hide the others
            print(f"  {impl} at batch {batch}: {type(e).__name__}: {e}", file=sys.stderr)
            out[impl] = None
    return out


def parser():
    """The options, each checked before any work (errors are one line, exit code 2)."""
    from course.tools.cli import OneLineParser, output_file
    p = OneLineParser(prog="python -m course.tools.scaling", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes: checks the pipeline (works without a GPU, "
                   "its times labelled as not a GPU's)")
    p.add_argument("--out", type=output_file, default=None, help="write the results as JSON to this file")
    return p


def main(argv=None):
    import course
    from course.runtime.device import describe
    from course.runtime.timing import label
    from course.tools import bench
    from course.tools.cli import write_json
    from course.train import init_params
    args = parser().parse_args(argv)
    if course.SIMULATOR and not args.quick:
        parser().error(f"the sweep times GPU kernels and needs a GPU (none here: {course.WHY}); "
                       "notebooks/results/scaling-*.json holds a GPU's, and --quick checks the pipeline here")
    cfg = bench.config(args.quick, course.SIMULATOR)
    data = bench.load(cfg)
    init = init_params(cfg["hidden"], bench.SEED, n_in=data[0].shape[1]).to_host()
    batches = (8, 16) if args.quick else BATCHES
    impls = ["course_plain", "course_plain_graph", "course_fused", "pytorch_eager", "pytorch_graph"]
    rows = []
    for b in batches:
        t0 = time.perf_counter()
        for impl, s in measure(data, cfg, init, b, impls).items():
            rows.append(dict(impl=impl, batch_size=b, epoch_s=s))
            print(f"batch {b:5d} {impl:20s} " + ("-" if s is None else label(f"{s * 1e3:9.2f} ms")), flush=True)
        print(f"  batch {b}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    n = len(data[0])                          # images per epoch
    floor = flops_per_epoch(n, data[0].shape[1], cfg["hidden"]) / (FP32_PEAK_TFLOPS * 1e12)
    result = dict(gpu=describe(course.SIMULATOR)["name"], quick=args.quick, n_train=len(data[0]),
                  flops_per_epoch=flops_per_epoch(n, data[0].shape[1], cfg["hidden"]), fp32_peak_tflops=FP32_PEAK_TFLOPS,
                  floor_s=floor, rows=rows)
    off_gpu = ": an H100's or H200's floor, not comparable with the times above" if course.SIMULATOR else ""
    print(f"compute floor: {result['flops_per_epoch'] / 1e9:.1f} GFLOP at the FP32 peak of {FP32_PEAK_TFLOPS:.0f} "
          f"TFLOP/s = {floor * 1e3:.2f} ms per epoch{off_gpu}")
    return 1 if (args.out and write_json(Path(args.out), result)) else 0


if __name__ == "__main__":
    sys.exit(main())
