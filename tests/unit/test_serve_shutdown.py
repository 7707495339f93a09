"""Stopping ``cdmpp serve`` with SIGTERM stops its worker processes too."""

import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_stops_the_server_and_every_worker():
    import httpx
    from programs import vector_add

    from cdmpp.tvm_compat import IRModule, save_json

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "cdmpp.cli", "serve", "--port", str(port), "--workers", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"cdmpp serve exited early: {proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline, "cdmpp serve did not come up"
            time.sleep(1)
        body = {"programs": [{"mod": save_json(IRModule({"main": vector_add.with_attr("global_symbol", "main")}))}]}
        assert httpx.post(f"{url}/predict", json=body, timeout=300).status_code == 200
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the server started no worker process"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        _, alive = psutil.wait_procs(children, timeout=30)
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, f"worker processes outlived the server: {[p.pid for p in alive]}"
    finally:
        if proc.poll() is None:
            proc.kill()
