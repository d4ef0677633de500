"""Submit's image checks: how fast ``submit`` stores decisions whose images it must fetch and
check, against the same decisions without images.

    python bench/submit_images.py            # 2,000 decisions
    python bench/submit_images.py -n 10000 --side 512

Writes ``-n`` one-question decisions into a new SQLite store three times: without images, each
with its own PNG (``--side`` pixels square, random noise so it does not compress) served by a
local HTTP server, and each with its PNG as a data URL. Prints the seconds and decisions per
second of each (the image runs include fetching each image once, opening it with pillow and
hashing it), and the requests the server answered.
"""

from __future__ import annotations

import argparse
import base64
import io
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
from PIL import Image

from app.engine import ReadSettings
from app.images import ImagePolicy
from app.runs.submit import SubmitRequest, submit_job
from app.store.db import make_engine, make_sessionmaker
from app.store.migrate import upgrade
from app.tokenizer.hf import load_tokenizer

QUESTION = {"red": {"type": "noul", "instructions": "Is the picture mostly red?"}}


def _png(seed: int, side: int) -> bytes:
    image = Image.effect_noise((side, side), 40 + seed % 50).convert("RGB")
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _serve(pictures: list[bytes]) -> tuple[ThreadingHTTPServer, list[int]]:
    hits = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits[0] += 1
            body = pictures[int(self.path.strip("/").removesuffix(".png"))]
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, hits


def _timed(folder: Path, name: str, images: Callable[[int], list[str]], n: int) -> float:
    path = folder / f"{name}.jsonl"
    with path.open("wb") as out:
        for i in range(n):
            line = {"id": f"d{i}", "state": f"Photo {i}.", "questions": QUESTION}
            if refs := images(i):
                line["images"] = refs
            out.write(orjson.dumps(line) + b"\n")
    url = f"sqlite:///{folder / name}.db"
    upgrade(url)
    engine = make_engine(url)
    request = SubmitRequest(path=path, run_name=name, settings=ReadSettings(), upstream="sim",
                            images=ImagePolicy())
    t0 = time.perf_counter()
    report = submit_job(request, make_sessionmaker(engine), load_tokenizer("standin"))
    seconds = time.perf_counter() - t0
    engine.dispose()
    assert report.inserted == n and not report.rejected, report.as_dict()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--side", type=int, default=256)
    args = parser.parse_args()
    pictures = [_png(i, args.side) for i in range(args.n)]
    server, hits = _serve(pictures)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    size = sum(map(len, pictures)) / len(pictures)
    print(f"{args.n} decisions, one {args.side}x{args.side} PNG each ({size / 1024:.0f} KiB "
          "on average)")
    with tempfile.TemporaryDirectory() as tmp:
        for name, images in (
                ("text", lambda i: []),
                ("http", lambda i: [f"{base}/{i}.png"]),
                ("data", lambda i: ["data:image/png;base64,"
                                    + base64.b64encode(pictures[i]).decode()])):
            seconds = _timed(Path(tmp), name, images, args.n)
            print(f"{name:5} {seconds:7.2f} s  {args.n / seconds:8.0f} decisions/s")
    print(f"image requests answered: {hits[0]}")
    server.shutdown()


if __name__ == "__main__":
    main()
