"""The candidate and baseline records: their journal lines and their csv rows read back as they were written."""
import csv
from dataclasses import replace

import pytest

from nas.records import (BaselineResult, Candidate, FinalScores, read_baseline_results, read_candidates,
                         write_baseline_results, write_candidates)
from nas.errors import RunDirError
from search_spaces import arch_key
from conftest import made_up_baseline


def _candidates():
    archs = [{"depth": [2, 3]}, {"depth": [1, 1]}, {"depth": [3, 3]}]
    plain = [Candidate(arch, arch_key(arch), "psnr", score, latency, "vpunn:VPU_2_7", params=1000 + i, macs=5000 + i,
                       id=i, generation=0, expected_latency_ms=round(latency * 1.1, 6))
             for i, (arch, score, latency) in enumerate(zip(archs, (30.5, 29.25, 31.0), (1.5, 0.75, 2.25)))]
    return [replace(plain[0], test_score=30.1, final=FinalScores(31.2, {"psnr": 30.9, "ssim": 0.91}, epochs=0)),
            plain[1],
            replace(plain[2], test_score=30.6, final=FinalScores(31.5, {"psnr": 31.1, "ssim": 0.93}, epochs=1.5,
                                                                int8_test=30.8))]


def test_candidates_csv_reads_back_as_written(tmp_path):
    path = tmp_path / "candidates.csv"
    written = write_candidates(path, _candidates())
    header, first, *_ = path.read_text().splitlines()
    assert header == ("id,generation,arch,psnr,test_psnr,latency_ms,cost_model,params,macs,is_pareto,final_psnr,"
                      "final_test_psnr,final_int8_test_psnr,final_epochs,is_final_pareto,final_test_ssim,"
                      "expected_latency_ms")
    assert first == '0,0,"{""depth"":[2,3]}",30.5,30.1,1.5,vpunn:VPU_2_7,1000,5000,True,31.2,30.9,,0,True,0.91,1.65'
    assert [c.is_pareto for c in written] == [True, True, True] and [c.is_final_pareto for c in written] == [
        True, False, True]
    read = read_candidates(path)
    assert read == written
    write_candidates(tmp_path / "again.csv", read)
    assert (tmp_path / "again.csv").read_text() == path.read_text()


def test_the_journal_line_round_trips_and_keeps_its_fields():
    candidate = _candidates()[1]
    entry = candidate.journal_entry()
    assert entry == {"key": candidate.key, "id": 1, "arch": {"depth": [1, 1]}, "psnr": 29.25, "latency_ms": 0.75,
                     "cost_model": "vpunn:VPU_2_7", "params": 1001, "macs": 5001, "generation": 0,
                     "expected_latency_ms": 0.825}
    assert Candidate.from_journal(entry, "psnr") == candidate
    final = FinalScores(31.2, {"psnr": 30.9, "ssim": 0.91}, epochs=0)
    assert FinalScores.from_journal(dict(final.journal_entry("psnr"), key="k", id=0), "psnr") == final


def test_a_cost_is_one_of_a_candidates_costs():
    candidate = _candidates()[0]
    assert [candidate.cost(name) for name in ("latency_ms", "macs", "params")] == [1.5, 5000, 1000]
    with pytest.raises(ValueError, match="not a cost of a candidate"):
        candidate.cost("flops")


def test_a_csv_without_a_metric_column_is_refused(tmp_path):
    path = tmp_path / "candidates.csv"
    path.write_text("id,arch\n0,{}\n")
    with pytest.raises(RunDirError, match="neither a top1 nor a psnr column"):
        read_candidates(path)


def test_baselines_csv_and_journal_keep_where_measured_figures_come_from(tmp_path):
    """A zoo network measured elsewhere (no val figure, `scores_from` set) beside one trained in the run: the
    csv gains a scores_from column, blank for the trained one; both read back, and round-trip their journal lines.
    Without a measured baseline the column is not written."""
    trained = BaselineResult("mnv2", "zoo", {"network": "zoo-mnv2"}, "top1", 88.5, {"top1": 88.0}, 0.25,
                             "vpunn:VPU_2_7", params=10, macs=20, note="trained from scratch", epochs=6.5,
                             device_ms={"VPU_2_7": 0.25})
    measured = replace(trained, name="mnv3", score=None, test={"top1": 93.22}, note="figures measured elsewhere",
                       scores_from="measured on 1x NVIDIA H200, 2026-12-04 (epochs 6.5)")
    write_baseline_results(tmp_path / "baselines.csv", [trained, measured], "top1", ["VPU_2_7"])
    header, _, second = (tmp_path / "baselines.csv").read_text().splitlines()
    assert header.endswith(",epochs,note,scores_from,arch") and second.startswith("mnv3,zoo,,93.22,")
    assert read_baseline_results(tmp_path / "baselines.csv") == [trained, measured]
    for result in (trained, measured):
        assert BaselineResult.from_journal(result.journal_entry(), "top1") == result
    write_baseline_results(tmp_path / "plain.csv", [trained], "top1", ["VPU_2_7"])
    assert "scores_from" not in (tmp_path / "plain.csv").read_text()


def test_a_baselines_csv_without_a_type_column_is_refused(tmp_path):
    """A baseline's type is a column of its own; the reader never tells it from the arch or the note."""
    path = tmp_path / "baselines.csv"
    write_baseline_results(path, [made_up_baseline("b", 80.0, 0.1, arch={"depth": [1, 2]})], "top1", [])
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, [c for c in rows[0] if c != "type"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(RunDirError, match="baselines.csv: no type column"):
        read_baseline_results(path)
