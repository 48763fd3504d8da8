"""`ttsfleet-runtime bench summarise` derives summary.json from one run's raw files: our medians, the
peer's, the start graphs, the profile's kernel count, and speedups on the same run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SUMMARISE = ["-m", "ttsfleet_runtime", "bench", "summarise"]


def ours_size(ms_per_frame: list[float], ttfa: list[float]) -> dict:
    return dict(
        single=[dict(ms_per_frame=m, ttfa_ms=30.0, rtf=m / 80) for m in ms_per_frame],
        ttfa_runs=[dict(ttfa_ms=t, ttfa_from_admission_ms=t - 1) for t in ttfa],
        graph_step_ms=dict(B1=3.1, B32=4.0, B128=6.5),
        batch=[
            dict(batch=1, audio_s_per_s=20.0, worst_stream_rtf=0.1),
            dict(batch=128, audio_s_per_s=400.0, worst_stream_rtf=0.4),
            dict(batch=256, error="TimeoutError()"),
        ],
        server_graphs=dict(graphs=15, decode_graphs=9, prefill_graphs=6, capture_s=6.25),
    )


def peer_size(ms_per_frame: list[float], ttfa: list[float]) -> dict:
    return dict(
        single=dict(
            stream_text=[dict(ms_per_frame=m) for m in ms_per_frame],
            nonstream_text=[dict(ms_per_frame=99.0)],
            streaming_chunk1=[dict(ttfa_ms=t) for t in ttfa],
        ),
        batch=dict(
            B1=dict(runs=[dict(audio_s_per_s_incl_decode=3.0)] * 2),
            B8=dict(
                runs=[dict(audio_s_per_s_incl_decode=30.0), dict(audio_s_per_s_incl_decode=25.0)]
            ),
            B32=dict(error="OOM"),
        ),
    )


def summarise(tmp_path: Path, files: dict[str, dict]) -> dict:
    args = []
    for flag, content in files.items():
        path = tmp_path / f"{flag}.json"
        path.write_text(json.dumps(content))
        args += [f"--{flag}", str(path)]
    out = tmp_path / "summary.json"
    subprocess.run([sys.executable, *SUMMARISE, *args, "--out", str(out)], check=True)
    return json.loads(out.read_text())


def test_fields_and_speedups_derive_from_the_raw_files(tmp_path):
    ours = dict(
        env=dict(gpu="NVIDIA H100 80GB HBM3", date="2026-11-24"),
        command="bench",
        wall_s=100.0,
        **{"1.7B": ours_size([3.6, 3.2, 3.4], [12.0, 10.0, 11.0, 14.0, 13.0])},
        **{"0.6B": dict(error="RuntimeError('boom')")},
    )
    peer = {"1.7B": peer_size([19.0, 20.4, 19.7], [110.0, 104.0, 120.0])}
    profile = dict(sizes={"1.7B": dict(summary=dict(kernels_per_step_b1=420.0))})
    summary = summarise(tmp_path, dict(ours=ours, peer=peer, profile=profile))

    assert summary["device"] == "NVIDIA H100 80GB HBM3" and summary["date"] == "2026-11-24"
    size = summary["sizes"]["1.7B"]
    assert size["ours"] == dict(
        ms_per_frame_b1=3.4,
        ttfa_ms_b1=12.0,
        rtf_b1=3.4 / 80,
        audio_s_per_s_max=400.0,
        batch_at_max=128,
        worst_stream_rtf_at_max=0.4,
        graph_step_ms_b1=3.1,
        graph_step_ms_b128=6.5,
        ttfa_from_admission_ms_b1=11.0,
        graphs=15,
        capture_s=6.25,
        kernels_per_step_b1=420.0,
    )
    # The peer's best batch is its warm (last) run: B8's 25, not its first 30.
    assert size["faster_qwen3_tts"] == dict(
        ms_per_frame_b1=19.7, ttfa_ms_b1=110.0, audio_s_per_s_max=25.0, batch_at_max=8
    )
    assert size["speedup_ms_per_frame_b1"] == round(19.7 / 3.4, 2)
    assert size["speedup_ttfa_ms_b1"] == round(110.0 / 12.0, 2)
    assert size["speedup_audio_s_per_s_max"] == round(400.0 / 25.0, 2)
    assert summary["sizes"]["0.6B"] == dict(error="RuntimeError('boom')")


def test_a_run_split_by_size_is_one_summary(tmp_path):
    first = {"env": dict(gpu="g", date="d1"), "1.7B": ours_size([3.0], [10.0])}
    second = {"env": dict(gpu="g", date="d2"), "0.6B": ours_size([2.0], [9.0])}
    (tmp_path / "a.json").write_text(json.dumps(first))
    (tmp_path / "b.json").write_text(json.dumps(second))
    out = tmp_path / "summary.json"
    subprocess.run(
        [sys.executable, *SUMMARISE, "--ours", str(tmp_path / "a.json")]
        + ["--ours", str(tmp_path / "b.json"), "--out", str(out)],
        check=True,
    )
    summary = json.loads(out.read_text())
    assert summary["date"] == "d1"
    assert summary["sizes"]["1.7B"]["ours"]["ms_per_frame_b1"] == 3.0
    assert summary["sizes"]["0.6B"]["ours"]["ms_per_frame_b1"] == 2.0


def test_without_peer_or_profile_there_are_no_speedups_or_kernel_counts(tmp_path):
    ours = {"env": dict(gpu="g", date="d"), "1.7B": ours_size([3.0], [10.0])}
    del ours["1.7B"]["server_graphs"]  # a run with --no-server-graphs
    size = summarise(tmp_path, dict(ours=ours))["sizes"]["1.7B"]
    assert set(size) == {"ours"}
    assert "kernels_per_step_b1" not in size["ours"] and "graphs" not in size["ours"]
    assert size["ours"]["ms_per_frame_b1"] == 3.0


def capacity_run(knee: float) -> dict:
    """capacity.json of `bench capacity`: per size its load figures (and more, not copied)."""
    load = dict(
        ttfa_p95_ms_at_10_rps=31.5,
        ttfa_p95_ms_at_20_rps=47.0,
        knee_rps=knee,
        max_concurrent_streams=256,
    )
    return dict(rates=dict(rates=[], knee_rps=knee), burst=dict(streams=256), load=load)


def test_codec_and_load_figures_join_each_size(tmp_path):
    ours = {"env": dict(gpu="g", date="d"), "1.7B": ours_size([3.0], [10.0])}
    ours["0.6B"] = ours_size([2.0], [9.0])
    codec = dict(
        benchmark="codec_scale",
        scale=[
            dict(frames=8, batch=64, decode_ms=7.0),
            dict(frames=8, batch=128, decode_ms=12.3456),
            dict(frames=1, batch=128, decode_ms=3.0),
        ],
    )
    capacity = dict(sizes={"1.7B": capacity_run(120.0), "0.6B": dict(errors={"rates": "boom"})})
    sizes = summarise(tmp_path, dict(ours=ours, codec=codec, capacity=capacity))["sizes"]
    assert sizes["1.7B"]["codec_ms_b128_n8"] == sizes["0.6B"]["codec_ms_b128_n8"] == 12.346
    assert sizes["1.7B"]["load"] == capacity_run(120.0)["load"]
    assert "load" not in sizes["0.6B"]  # its capacity run failed: nothing to copy


def test_a_later_capacity_file_only_fills_the_load_figures_an_earlier_one_lacks(tmp_path):
    """Two capacity runs of one size: the first one's figures stand; the second gives only
    what the first did not measure (here its burst's concurrent streams)."""
    ours = {"env": dict(gpu="g", date="d"), "0.6B": ours_size([2.0], [9.0])}
    first = capacity_run(60.0)
    first["load"]["max_concurrent_streams"] = None  # run without the burst
    second = capacity_run(40.0)
    second["load"]["ttfa_p95_ms_at_10_rps"] = 99.0
    paths = []
    for name, content in [
        ("ours", ours),
        ("capacity-a", dict(sizes={"0.6B": first})),
        ("capacity-b", dict(sizes={"0.6B": second})),
    ]:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(content))
        paths += [f"--{name.split('-')[0]}", str(path)]
    out = tmp_path / "summary.json"
    subprocess.run([sys.executable, *SUMMARISE, *paths, "--out", str(out)], check=True)
    load = json.loads(out.read_text())["sizes"]["0.6B"]["load"]
    assert load == dict(
        ttfa_p95_ms_at_10_rps=31.5,
        ttfa_p95_ms_at_20_rps=47.0,
        knee_rps=60.0,
        max_concurrent_streams=256,
    )


def test_the_codec_figure_comes_from_codec_scale_and_missing_files_are_left_out(tmp_path):
    ours = {"env": dict(gpu="g", date="d"), "1.7B": ours_size([3.0], [10.0])}
    codec = dict(
        scale=[
            dict(batch=128, frames=1, decode_ms=3.0),
            dict(batch=128, frames=8, decode_ms=14.2261),
            dict(batch=256, frames=8, decode_ms=28.1),
        ]
    )
    assert (
        summarise(tmp_path, dict(ours=ours, codec=codec))["sizes"]["1.7B"]["codec_ms_b128_n8"]
        == 14.226
    )

    out = tmp_path / "summary.json"
    (tmp_path / "ours.json").write_text(json.dumps(ours))
    done = subprocess.run(
        [sys.executable, *SUMMARISE, "--ours", str(tmp_path / "ours.json")]
        + ["--codec", str(tmp_path / "absent.json"), "--capacity", str(tmp_path / "none.json")]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "absent.json" in done.stderr
    size = json.loads(out.read_text())["sizes"]["1.7B"]
    assert "codec_ms_b128_n8" not in size and "load" not in size


def test_start_up_seconds_join_each_size_that_has_them(tmp_path):
    ours = {"env": dict(gpu="g", date="d"), "1.7B": ours_size([3.0], [10.0])}
    ours["0.6B"] = ours_size([2.0], [9.0])
    startup = dict(
        benchmark="startup",
        sizes={
            "1.7B": dict(startup_s=11.2, startup_s_cold=48.0, warm=dict(phases={"total": 11.0})),
            "0.6B": dict(startup_s=None, startup_s_cold=30.5, errors={"warm": "boom"}),
        },
    )
    sizes = summarise(tmp_path, dict(ours=ours, startup=startup))["sizes"]
    assert (sizes["1.7B"]["startup_s"], sizes["1.7B"]["startup_s_cold"]) == (11.2, 48.0)
    assert "startup_s" not in sizes["0.6B"] and sizes["0.6B"]["startup_s_cold"] == 30.5


def test_start_up_figures_join_an_existing_summary_and_change_nothing_else(tmp_path):
    ours = {"env": dict(gpu="g", date="d"), "1.7B": ours_size([3.0], [10.0])}
    before = summarise(tmp_path, dict(ours=ours))
    startup = dict(sizes={"1.7B": dict(startup_s=11.4, startup_s_cold=96.7)})
    (tmp_path / "startup.json").write_text(json.dumps(startup))
    out = tmp_path / "summary.json"
    subprocess.run(
        [
            sys.executable,
            *SUMMARISE,
            "--startup",
            str(tmp_path / "startup.json"),
            "--out",
            str(out),
        ],
        check=True,
    )
    after = json.loads(out.read_text())
    assert after["sizes"]["1.7B"].pop("startup_s") == 11.4
    assert after["sizes"]["1.7B"].pop("startup_s_cold") == 96.7
    assert after == before
    refused = subprocess.run(
        [sys.executable, *SUMMARISE, "--out", str(out)], capture_output=True, text=True
    )
    assert refused.returncode == 2 and "--startup" in refused.stderr


def test_load_figures_join_an_existing_summary_keeping_what_the_run_did_not_measure(tmp_path):
    ours = {"env": dict(gpu="g", date="d"), "1.7B": ours_size([3.0], [10.0])}
    old_load = dict(
        ttfa_p95_ms_at_10_rps=51.4,
        ttfa_p95_ms_at_20_rps=70.4,
        knee_rps=30.0,
        max_concurrent_streams=256,
    )
    capacity = dict(sizes={"1.7B": dict(load=old_load)})
    before = summarise(tmp_path, dict(ours=ours, capacity=capacity))
    new_load = dict(
        ttfa_p95_ms_at_10_rps=None,
        ttfa_p95_ms_at_20_rps=47.1,
        knee_rps=100.0,
        max_concurrent_streams=None,
    )
    (tmp_path / "capacity.json").write_text(json.dumps(dict(sizes={"1.7B": dict(load=new_load)})))
    out = tmp_path / "summary.json"
    subprocess.run(
        [sys.executable, *SUMMARISE, "--capacity", str(tmp_path / "capacity.json")]
        + ["--out", str(out)],
        check=True,
    )
    after = json.loads(out.read_text())
    assert after["sizes"]["1.7B"].pop("load") == dict(
        ttfa_p95_ms_at_10_rps=51.4,
        ttfa_p95_ms_at_20_rps=47.1,
        knee_rps=100.0,
        max_concurrent_streams=256,
    )
    before["sizes"]["1.7B"].pop("load")
    assert after == before


def test_the_codec_figure_joins_an_existing_summary_and_changes_nothing_else(tmp_path):
    ours = {"env": dict(gpu="g", date="d"), "1.7B": ours_size([3.0], [10.0])}
    ours["0.6B"] = ours_size([2.5], [9.0])
    old_codec = dict(scale=[dict(batch=128, frames=8, decode_ms=58.547)])
    before = summarise(tmp_path, dict(ours=ours, codec=old_codec))
    new_codec = dict(scale=[dict(batch=32, frames=8, decode_ms=5.9)])
    new_codec["scale"].append(dict(batch=128, frames=8, decode_ms=19.6561))
    (tmp_path / "codec.json").write_text(json.dumps(new_codec))
    out = tmp_path / "summary.json"
    subprocess.run(
        [sys.executable, *SUMMARISE, "--codec", str(tmp_path / "codec.json"), "--out", str(out)],
        check=True,
    )
    after = json.loads(out.read_text())
    for size in ("1.7B", "0.6B"):
        assert after["sizes"][size].pop("codec_ms_b128_n8") == 19.656
        assert before["sizes"][size].pop("codec_ms_b128_n8") == 58.547
    assert after == before


def test_another_tokenizer_rate_is_a_block_beside_the_12_hz_figures(tmp_path):
    ours = {"env": dict(gpu="g", date="d"), "1.7B": ours_size([3.0], [10.0])}
    before = summarise(tmp_path, dict(ours=ours))
    files = {
        "ours": {"env": dict(gpu="g", date="d2"), "1.7B": ours_size([12.0], [38.0])},
        "capacity": dict(sizes={"1.7B": capacity_run(knee=20.0)}),
        "startup": dict(sizes={"1.7B": dict(startup_s=14.6, startup_s_cold=67.2)}),
    }
    args = []
    for flag, content in files.items():
        (tmp_path / f"{flag}25.json").write_text(json.dumps(content))
        args += [f"--{flag}", str(tmp_path / f"{flag}25.json")]
    out = tmp_path / "summary.json"
    subprocess.run(
        [sys.executable, *SUMMARISE, "--tokenizer-rate", "25", *args, "--out", str(out)],
        check=True,
    )
    after = json.loads(out.read_text())
    block = after["sizes"]["1.7B"].pop("25Hz")
    assert after == before  # the 12 Hz figures, device and notes untouched
    assert block["ours"]["ms_per_frame_b1"] == 12.0 and block["ours"]["ttfa_ms_b1"] == 38.0
    assert block["load"]["knee_rps"] == 20.0
    assert (block["startup_s"], block["startup_s_cold"]) == (14.6, 67.2)
    assert "faster_qwen3_tts" not in block and "codec_ms_b128_n8" not in block
    refused = subprocess.run(
        [sys.executable, *SUMMARISE, "--tokenizer-rate", "25", "--capacity", args[3]]
        + ["--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "--ours" in refused.stderr
