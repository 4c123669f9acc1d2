"""Start-up time of `skyrl --help` and `skyrl plugins --all` (target: under 1 s each).

Run: python tests/benchmarks/bench_startup.py [--repeat 5]
"""

import argparse
import statistics
import subprocess
import sys
import time


def timed(args, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "skyrl_core.cli", *args], capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    ns = parser.parse_args()
    for args in (["--help"], ["plugins", "--all"], ["tools"]):
        med, best = timed(args, ns.repeat)
        print(f"skyrl {' '.join(args):<16} median {med:.3f} s  best {best:.3f} s")


if __name__ == "__main__":
    main()
