"""`cascade scenario --hf-config` and `cascade validate --serving` as a user runs them: a
subprocess on a small config written here, no trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
        "intermediate_size": 4096, "num_attention_heads": 16, "num_hidden_layers": 4, "num_key_value_heads": 4,
        "vocab_size": 32000, "tie_word_embeddings": True}


def _cascade(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "programs.cli", *argv], capture_output=True, text=True,
                          timeout=300)


def test_scenario_from_a_config_answers_ttft_and_tpot(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    out = _cascade("scenario", "--hf-config", str(cfg), "--gpu", "NVIDIA B200", "--tp", "2", "--quant", "fp8",
                   "--kv-dtype", "fp8", "--concurrency", "8", "--prompt", "256", "--output", "32", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["completed"] == 80
    assert 0 < res["ttft_ms"]["median"] <= res["ttft_ms"]["max"]
    assert 0 < res["tpot_ms"]["mean"] < 100
    assert res["basis"]["gpu"] == "SM100_B200" and len(res["basis"]["llm_calibration"]["digest"]) == 16
    assert "TP 2" in res["basis"]["workload"] and res["scenario"]["concurrency"] == 8
    # as a benchmark runs it: clients started together, 2 x 8 warm-up requests left out of the 80
    assert res["scenario"]["clients_start"] == "together" and res["scenario"]["warmup_requests"] == 16
    # the engine vllm serve starts on a B200 (>= 70 GiB): its token budget and sequences, echoed
    sched = res["scenario"]["scheduler"]
    assert (sched["max_num_batched_tokens"], sched["max_num_seqs"]) == (8192, 1024)
    spread = _cascade("scenario", "--hf-config", str(cfg), "--gpu", "NVIDIA B200", "--tp", "2", "--quant", "fp8",
                      "--concurrency", "8", "--prompt", "256", "--output", "32", "--clients-start", "staggered",
                      "--warmup", "0", "--json")
    assert spread.returncode == 0, spread.stderr
    other = json.loads(spread.stdout)
    assert other["completed"] == 80 and other["scenario"]["clients_start"] == "staggered"
    assert other["ttft_ms"]["mean"] != res["ttft_ms"]["mean"]
    bad = _cascade("scenario", "--hf-config", str(cfg), "--concurrency", "8")
    assert bad.returncode != 0 and "--gpu" in bad.stderr


def test_each_gpu_gets_the_batch_limits_vllm_gives_it(tmp_path: Path) -> None:
    """vllm serve on an A100 or a 48 GB L40S budgets 2048 tokens and 256 sequences a step: 64
    clients of 4k prompts are then prefilled in 2k chunks; a limit given is kept."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    base = ("scenario", "--hf-config", str(cfg), "--concurrency", "64", "--requests", "64", "--warmup", "0",
            "--prompt", "4096", "--output", "8", "--json")
    got = {}
    for gpu in ("A100", "L40S", "H100"):
        out = _cascade(*base, "--gpu", gpu)
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        got[gpu] = res
        sched = res["scenario"]["scheduler"]
        assert (sched["max_num_batched_tokens"], sched["max_num_seqs"]) == \
            ((8192, 1024) if gpu == "H100" else (2048, 256)), gpu
    given = _cascade(*base, "--gpu", "A100", "--max-num-batched-tokens", "8192", "--max-num-seqs", "32")
    assert given.returncode == 0, given.stderr
    res = json.loads(given.stdout)
    assert (res["scenario"]["scheduler"]["max_num_batched_tokens"], res["scenario"]["scheduler"]["max_num_seqs"]) \
        == (8192, 32)
    # a 4k prompt in 2k chunks takes two steps of the A100 where the 8k budget takes one
    assert res["steps"] != got["A100"]["steps"]


TINY_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 1024,
            "intermediate_size": 4096, "moe_intermediate_size": 512, "num_experts": 16, "num_experts_per_tok": 4,
            "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "num_hidden_layers": 4,
            "vocab_size": 32000, "tie_word_embeddings": True}


def test_data_parallel_ranks_serve_as_engines_of_their_own(tmp_path: Path) -> None:
    """--dp 4 --ep 4: four engines of one GPU stepping together, the experts shared."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_MOE))
    base = ("scenario", "--hf-config", str(cfg), "--gpu", "H200", "--concurrency", "16", "--requests", "64",
            "--prompt", "512", "--output", "32", "--json")
    out = _cascade(*base, "--dp", "4", "--ep", "4")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["completed"] == 64 and len(res["replicas"]) == 1  # the four ranks step as one group
    assert res["scenario"]["scheduler"]["max_num_seqs"] == 4 * 1024
    assert "DP 4" in res["basis"]["workload"]
    # the same 16 clients on one engine of TP 4 (experts over 4 GPUs alike): another answer
    tp4 = _cascade(*base, "--tp", "4", "--ep", "4")
    assert tp4.returncode == 0, tp4.stderr
    assert json.loads(tp4.stdout)["tpot_ms"]["mean"] != res["tpot_ms"]["mean"]
    bad = _cascade(*base, "--dp", "2", "--ep", "3")
    assert bad.returncode != 0 and "ep" in bad.stderr and "dp x tp = 2" in bad.stderr


def test_the_context_limit_is_the_configs_own(tmp_path: Path) -> None:
    """A described model's requests are held to its max_position_embeddings, not --model's window."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({**TINY, "max_position_embeddings": 16384}))
    base = ("scenario", "--hf-config", str(cfg), "--gpu", "H100", "--concurrency", "4", "--requests", "8",
            "--prompt", "2048", "--json")
    ok = _cascade(*base, "--output", "4096")  # 6144 tokens: past 4096, within the config's 16384
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["completed"] == 8
    over = _cascade(*base, "--output", "16384")
    assert over.returncode != 0 and "16384" in over.stderr and "context" in over.stderr


def test_validate_serving_scores_rows_per_model_and_gpu(tmp_path: Path) -> None:
    (tmp_path / "model_configs").mkdir()
    (tmp_path / "model_configs" / "tiny.json").write_text(json.dumps(TINY))
    (tmp_path / "model_configs" / "model_map.csv").write_text("model_path,config_files,match\nme/tiny,tiny.json,exact\n")
    head = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,"
            "moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,"
            "silicon_tpot_ms")
    rows = ["a,src; silicon_concurrency=4,vllm,0.12.0,me/tiny,h100_sxm,,agg,512,64,,,4,1,1,,1,1,20.0,2.0",
            "b,src; silicon_concurrency=16,vllm,0.12.0,me/tiny,h100_sxm,,agg,512,64,,,16,1,1,,1,1,40.0,3.0",
            "c,src,vllm,0.12.0,me/tiny,h200_sxm,fp8,agg,1024,32,fp8,fp8,8,2,1,,1,1,30.0,2.5",
            # the MoE over 4 GPUs, attention over 2: two data-parallel engines of TP 2
            "d,src; silicon_concurrency=8,vllm,0.12.0,me/moe,h200_sxm,,agg,512,32,,,8,2,1,,4,1,30.0,2.5"]
    (tmp_path / "model_configs" / "moe.json").write_text(json.dumps(TINY_MOE))
    with (tmp_path / "model_configs" / "model_map.csv").open("a") as fh:
        fh.write("me/moe,moe.json,exact\n")
    (tmp_path / "serving.csv").write_text("\n".join([head, *rows]) + "\n")
    out = _cascade("validate", "--data", str(tmp_path), "--serving", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["clients_start"] == "together" and doc["engine"] == "aiconfigurator"
    groups = {(s["model"], s["gpu"]): s for s in doc["serving"]}
    assert set(groups) == {("me/tiny", "SM90_H100"), ("me/tiny", "SM90_H200"), ("me/moe", "SM90_H200")}
    h100 = groups[("me/tiny", "SM90_H100")]
    assert h100["n"] == 2 and h100["backend"] == "vllm"
    assert h100["ttft_mape_pct"] >= 0 and h100["tpot_mape_pct"] >= 0 and h100["group_mean_tpot_mape_pct"] is not None
    by_id = {r["id"]: r for r in doc["rows"]}
    assert by_id["b"]["concurrency"] == 16 and by_id["c"]["concurrency"] == 8 and by_id["c"]["quant"] == "fp8"
    assert by_id["c"]["tp"] == 2
    assert (by_id["d"]["tp"], by_id["d"]["dp"], by_id["d"]["pred_tpot_ms"] > 0) == (2, 2, True)
    # the engine as the benchmark's generator deploys it: batch_size + isl + 1500 tokens a step
    assert (by_id["a"]["max_num_batched_tokens"], by_id["a"]["max_num_seqs"]) == (4 + 512 + 1500, 4)
