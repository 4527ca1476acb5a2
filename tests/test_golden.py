"""The golden checks of tests/golden.py themselves: the close check across kinds of CPU lets rounding through and
stops a change of behaviour."""
import csv
import io

import pytest
from golden import GOLDEN, SCORE_TOLERANCE, assert_close_to

CONFIGS = ("fmnist_mobilenet_smoke", "fmnist_resnet_smoke", "sr_edsr_x2_smoke")


def _recorded(config_name):
    files = sorted(GOLDEN.glob(f"*/{config_name}.candidates.csv"))
    assert files, f"no golden {config_name}.candidates.csv is committed"
    return [f.read_text() for f in files]


def _edited(text, edit):
    rows = list(csv.DictReader(io.StringIO(text)))
    edit(rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


@pytest.mark.parametrize("config_name", CONFIGS)
def test_runs_of_two_cpus_are_close(config_name):
    first, *others = _recorded(config_name)
    if not others:  # results changed on purpose are recorded on one CPU; the others record theirs when they run
        pytest.skip(f"{config_name}: golden files of one kind of CPU only")
    for other in others:
        assert_close_to(other, first, config_name)


@pytest.mark.parametrize("config_name", CONFIGS)
def test_a_change_of_behaviour_is_not_close(config_name):
    golden = _recorded(config_name)[0]
    metric = "psnr" if config_name.startswith("sr") else "top1"

    def score_off(rows):
        final = next(r for r in rows if r[f"final_{metric}"])
        final[f"final_{metric}"] = str(float(final[f"final_{metric}"]) + 2 * SCORE_TOLERANCE[metric])

    def other_first_generation(rows):
        rows[0]["arch"], rows[-1]["arch"] = rows[-1]["arch"], rows[0]["arch"]

    def other_latency(rows):
        rows[1]["latency_ms"] = str(float(rows[1]["latency_ms"]) * 1.01)

    def other_final_epochs(rows):
        final = next(r for r in rows if r["final_epochs"])
        final["final_epochs"] = str(float(final["final_epochs"]) + 1)

    for edit in (score_off, other_first_generation, other_latency, other_final_epochs):
        with pytest.raises(AssertionError):
            assert_close_to(_edited(golden, edit), golden, config_name)
