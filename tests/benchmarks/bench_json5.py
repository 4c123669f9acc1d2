"""Why the tool-call JSON repair does not use ``json5``: its speed against ``ast.literal_eval`` and our whole
:func:`~skyrl_core.default_plugins.parsers.repair.loads_tolerant` on single-quoted dicts with a trailing comma
(both readers accept them), and one argument it reads differently (a regex's ``\\d``).

json5 is not a dependency of skyrl: ``pip install json5`` first.

    python tests/benchmarks/bench_json5.py
"""

from __future__ import annotations

import ast
import time


def _best(fn, text: str, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(text)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    import json5

    from skyrl_core.default_plugins.parsers.repair import loads_tolerant

    for keys in (20, 200, 4000):
        text = "{" + ", ".join(f"'k{i}': 'value {i}'" for i in range(keys)) + ",}"
        print(f"{len(text)} chars: json5 {_best(json5.loads, text) * 1e3:.1f} ms, ast.literal_eval "
              f"{_best(ast.literal_eval, text) * 1e3:.1f} ms, loads_tolerant {_best(loads_tolerant, text) * 1e3:.1f} ms")
    regex = '{"re": "\\d+"}'
    print(f"{regex}: json5 {json5.loads(regex)!r}, loads_tolerant {loads_tolerant(regex)!r}")


if __name__ == "__main__":
    main()
