"""scripts/bench_gpu.py and scripts/make_imagefolder.py run (on the CPU here: a check of the scripts, not figures;
the GPU figures are in docs/results.md)."""
import subprocess
import sys

from PIL import Image

from conftest import REPO, SMOKE


def _run(*argv: str) -> str:
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_bench_gpu_times_supernet_finalisation_and_zoo():
    out = _run("scripts/bench_gpu.py", SMOKE, "--archs", "2", "--steps", "2", "--zoo", "mobilenetv3_small_050")
    for what in ("supernet sandwich", "finalisation, 2 archs in lockstep", "zoo mobilenetv3_small_050"):
        assert what in out and "images/s" in out.split(what)[1].splitlines()[0]


def test_generated_imagefolder_feeds_the_224px_benchmark(tmp_path):
    folder = tmp_path / "jpegs"
    _run("scripts/make_imagefolder.py", str(folder), "--classes", "3", "--train", "6", "--val", "2", "--workers", "2")
    train = sorted((folder / "train").glob("*/*.jpg"))
    assert len(train) == 18 and len(list((folder / "val").glob("*/*.jpg"))) == 6
    with Image.open(train[0]) as image:
        assert image.format == "JPEG" and min(image.size) >= 300  # ImageNet-sized: decoding costs what it does there
    again = tmp_path / "again"
    _run("scripts/make_imagefolder.py", str(again), "--classes", "3", "--train", "6", "--val", "2")
    assert (again / "train" / "class0001" / "00003.jpg").read_bytes() == train[9].read_bytes()  # deterministic
    out = _run("scripts/bench_gpu.py", "--imagenet", str(folder), "--loader-workers", "2", "--seconds", "1",
               "task.val_size=2", "task.batch_size=4", "task.image_size=64")
    assert "loader alone:" in out and "timm mobilenetv3_large_100" in out and "supernet / timm images/s" in out
