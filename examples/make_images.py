"""Write the image examples: two small charts drawn with pillow (examples/images/*.png) and
examples/images.jsonl, whose lines carry them as data URLs, with its simulator key
(examples/images.key.jsonl).

    python examples/make_images.py                 # rewrites the files in examples/
    python examples/make_images.py --out /tmp/ex   # elsewhere
"""

from __future__ import annotations

import argparse
import base64
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
SIZE = (64, 48)
CHART_TYPE = {"type": "choice", "instructions": "Which kind of chart is this?",
              "criteria": {"bar": "vertical bars of different heights",
                           "line": "a line joining points",
                           "pie": "a disc cut into slices"}}
RED = {"type": "noul", "instructions": "Is any part of the chart drawn in red?"}
SAME = {"type": "noul", "instructions": "Are the two charts the same kind of chart?"}


def bar_chart() -> Image.Image:
    image = Image.new("RGB", SIZE, "white")
    draw = ImageDraw.Draw(image)
    for i, height in enumerate((20, 34, 12, 40)):
        x = 6 + i * 14
        draw.rectangle((x, SIZE[1] - 4 - height, x + 9, SIZE[1] - 4), fill=(40, 90, 200))
    draw.line((2, SIZE[1] - 4, SIZE[0] - 2, SIZE[1] - 4), fill="black")
    return image


def line_chart() -> Image.Image:
    image = Image.new("RGB", SIZE, "white")
    draw = ImageDraw.Draw(image)
    points = [(4, 40), (16, 28), (28, 32), (40, 14), (52, 20), (60, 8)]
    draw.line(points, fill=(210, 30, 30), width=2)
    draw.line((2, SIZE[1] - 4, SIZE[0] - 2, SIZE[1] - 4), fill="black")
    return image


def png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG", optimize=False, compress_level=9)
    return out.getvalue()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def lines(bar: str, line: str) -> list[dict[str, Any]]:
    return [
        {"id": "bar", "cell": "charts", "state": "Figure 1 of the quarterly report.",
         "images": [bar], "questions": {"kind": CHART_TYPE, "red": RED},
         "expected": {"kind": "bar", "red": "no"}},
        {"id": "line", "cell": "charts", "state": "Figure 2 of the quarterly report.",
         "images": [line], "questions": {"kind": CHART_TYPE, "red": RED},
         "expected": {"kind": "line", "red": "yes"}},
        {"id": "line-no-text", "cell": "charts", "state": None,
         "images": [line], "questions": {"kind": CHART_TYPE},
         "expected": {"kind": "line"}},
        {"id": "pair", "cell": "pairs", "state": "Two charts from the quarterly report.",
         "images": [bar, line], "questions": {"same": SAME}, "expected": {"same": "no"}},
    ]


KEY = [
    {"state": "Figure 1 of the quarterly report.", "question": "Which kind of chart is this?",
     "label": "A"},
    {"state": "Figure 1 of the quarterly report.",
     "question": "Is any part of the chart drawn in red?", "label": "no"},
    {"state": "Figure 2 of the quarterly report.", "question": "Which kind of chart is this?",
     "label": "B"},
    {"state": "Figure 2 of the quarterly report.",
     "question": "Is any part of the chart drawn in red?", "label": "yes"},
    {"state": "Two charts from the quarterly report.",
     "question": "Are the two charts the same kind of chart?", "label": "no"},
]


def write(out: Path) -> None:
    (out / "images").mkdir(parents=True, exist_ok=True)
    pictures = {"bar.png": png(bar_chart()), "line.png": png(line_chart())}
    for name, data in pictures.items():
        (out / "images" / name).write_bytes(data)
    job = lines(data_url(pictures["bar.png"]), data_url(pictures["line.png"]))
    (out / "images.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in job), encoding="utf-8")
    (out / "images.key.jsonl").write_text(
        "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in KEY), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE)
    write(parser.parse_args().out)


if __name__ == "__main__":
    main()
