#!/usr/bin/env python3
"""Derives this folder's files from RouteLLM's GSM8K evaluation data.

Input: a copy of RouteLLM's routellm/evals/gsm8k/ folder (lm-sys/RouteLLM,
Apache-2.0, commit 0b64fdafe049e596a3f5657c219329f24af24198): the files
gsm8k_responses.csv, test.jsonl and contaminated_prompts.jsonl.

    python3 data/routellm-gsm8k/make.py SRC_DIR [COUNT]

Writes, for the first COUNT (default 200) test questions that RouteLLM does
not list as contaminated, in test-set order:
- gsm8k-COUNT.workload.jsonl: edgecloud workload items, graded `number`
  against GSM8K's reference answer (the number after `####`);
- gsm8k-COUNT.gpt-4-1106-preview.answers.jsonl and
  gsm8k-COUNT.mixtral-8x7b-instruct.answers.jsonl: each model's recorded
  answer to each question, for `edgecloud bench replay-cloud`, with
  RouteLLM's own grade of it (`routellm_correct`) kept as `source` text.
"""
import csv
import json
import sys
from pathlib import Path

SYSTEM = ("Solve the math problem step by step. "
          "End with the final answer as: The answer is N.")
# Chain of thought runs 200-300 tokens on these questions: room for it.
MAX_TOKENS = 512


def main():
    src = Path(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    out = Path(__file__).resolve().parent
    rows = list(csv.DictReader(open(src / "gsm8k_responses.csv", encoding="utf-8")))
    refs = {}
    for line in open(src / "test.jsonl", encoding="utf-8"):
        t = json.loads(line)
        refs[t["question"]] = t["answer"].rsplit("####", 1)[1].strip().replace(",", "")
    dropped = {json.loads(l)["eval_prompt"]
               for l in open(src / "contaminated_prompts.jsonl", encoding="utf-8")}
    rows = [r for r in rows if r["prompt"] not in dropped][:count]
    models = {
        "gpt-4-1106-preview": "gpt-4-1106-preview",
        "mixtral-8x7b-instruct": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    }
    with open(out / f"gsm8k-{count}.workload.jsonl", "w", encoding="utf-8") as w:
        for i, r in enumerate(rows):
            w.write(json.dumps({
                "id": f"gsm8k-{i:04d}",
                "tag": "gsm8k",
                "system": SYSTEM,
                "prompt": r["prompt"],
                "expected": refs[r["prompt"]],
                "grader": "number",
                "sampling": {"max_tokens": MAX_TOKENS, "temperature": 0},
            }, ensure_ascii=False) + "\n")
    for short, col in models.items():
        with open(out / f"gsm8k-{count}.{short}.answers.jsonl", "w", encoding="utf-8") as w:
            for r in rows:
                w.write(json.dumps({
                    "prompt": r["prompt"],
                    "answer": r[col + "_response"],
                    "source": f"{col} via RouteLLM (routellm_correct={r[col]})",
                }, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} items to {out}")


if __name__ == "__main__":
    main()
