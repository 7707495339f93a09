"""Ask a running ``cdmpp serve`` how long a network takes on a device, and print a per-task table.

What a training simulator does: get each operator's (tuning task's) latency once, then
lay the calls out on its own timeline.  Standard library only.

    cdmpp serve --port 8000 &
    python docs/examples/estimate_client.py --url http://127.0.0.1:8000 \\
        --network resnet_18-b1 --device cpu-amd_epyc-znver4-avx512
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request


def estimate(url: str, network: str, device: str | None = None, samples: int = 32, timeout_s: float = 900.0) -> dict:
    """``POST /estimate`` for a zoo network; returns the response JSON (latencies in seconds).

    Raises:
        RuntimeError: the server answered with an error (its message is kept).
    """
    body = json.dumps({"network": network, "device": device, "samples": samples}).encode()
    req = urllib.request.Request(f"{url}/estimate", body, {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"HTTP {err.code}: {json.load(err).get('detail')}") from err


def table(est: dict) -> str:
    """One line per task (milliseconds per call, calls per inference), then the weighted total."""
    lines = [f"{est['network']} on {est['device']}", f"{'task':44s} {'calls':>5s} {'ms':>9s} {'10-90% ms':>19s}  source"]
    for t in est["tasks"]:
        lines.append(
            f"{t['task'][:44]:44s} {t['weight']:5d} {1e3 * t['latency_s']:9.3f} "
            f"{1e3 * t['low_s']:9.3f}-{1e3 * t['high_s']:<9.3f}  {t['source']}"
        )
    lines.append(f"total: {1e3 * est['total_s']:.2f} ms (10-90%: {1e3 * est['low_s']:.2f}-{1e3 * est['high_s']:.2f} ms)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--network", default="resnet_18-b1")
    parser.add_argument("--device", default=None, help="a device id from GET /devices (default: the server picks)")
    parser.add_argument("--samples", type=int, default=32)
    args = parser.parse_args(argv)
    print(table(estimate(args.url, args.network, args.device, args.samples)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
