"""Memory retrieval on LoCoMo through the local engine's HTTP API: does search find the turns that answer a question?

Not a test. LoCoMo (Maharana et al., ACL 2024) holds long conversations between two people with questions whose
evidence is a set of turns; the data, its source and the protocol are described in its directory's README.md
(default: ../shared/data/locomo beside the checkout, --locomo DIR; the release's own locomo10.json, all ten
conversations in one file, is read as well, its conversation "conv-26" named 26). No LLM anywhere:

- every turn of every conversation becomes one note, `"<speaker> (<session date>): <text>"` plus
  `" [shares a photo: <caption>]"` when the turn shares one, tagged `collection:memory` and
  `locomo:<conversation>`, with source_path `locomo/<conversation>/<dia_id>`, posted in conversation order;
- every question of categories 1-4 (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 5 has no answer in
  the conversation) with at least one evidence id is sent as a search (hybrid by default) restricted to its
  conversation's tag, top 10;
- per question, over the first k distinct turns found (k = 1, 5, 10): hit@k (any evidence turn among them),
  recall@k (the share of the evidence turns among them), session@k (any evidence turn's session among their
  sessions); the means overall, per category and per conversation, search latency (client round trip) and the
  time from the first note posted to the last one searchable.

    python bench/memory.py                                  # fresh engine: store the turns, ask the questions
    python bench/memory.py --data /tmp/locomo --keep        # keep the data directory ...
    python bench/memory.py --data /tmp/locomo --set KB_ENGINE_FUSION=rrf   # ... and ask again with other settings
    python bench/memory.py --json                           # the figures as JSON
    python bench/memory.py --locomo locomo10.json --conversations 44,47,48,49,50   # the release's other five
    python bench/memory.py --data /tmp/memory-1m --keep     # beside other documents: a copy of a data
                                                            # directory of bench/search_scale.py's tiers
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import REPO, EngineApi, add_engine_options, benchmark_engine, engine_env, machine, percentile, progress

DEFAULT_LOCOMO = REPO.parent / "shared" / "data" / "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (1, 5, 10)
TOP_N = 10
MEMORY_TAG = "collection:memory"
_DIA_ID = re.compile(r"^D(\d+):(\d+)$")
_SESSION_KEY = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True)
class Turn:
    conversation: str
    dia_id: str
    text: str


@dataclass(frozen=True)
class Question:
    conversation: str
    text: str
    category: int
    evidence: tuple[str, ...]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO,
                        help="directory of LoCoMo conversations, one <name>.json each, or the release's locomo10.json "
                             "(a file, or a directory holding it) (default: %(default)s)")
    parser.add_argument("--conversations", help="comma-separated conversation names, e.g. 26,30 (default: every one there)")
    add_engine_options(parser, "the turns", "KB_ENGINE_FUSION=rrf")
    parser.add_argument("--mode", default="hybrid", choices=("hybrid", "fts", "vector"))
    parser.add_argument("--runs", type=Path, help="also write each question's ranked turns to this JSON file")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    return parser.parse_args(argv)


# --- data -------------------------------------------------------------------------------------------


def load(where: Path, names: Sequence[str] | None) -> tuple[list[Turn], list[Question]]:
    """The turns as notes and the answerable questions of the conversations at `where`.

    `where` is a directory of `<name>.json` files, one conversation each (the layout of shared/data/locomo), or
    of the release's `locomo10.json`, or one such file itself. The release's file is a list of samples
    `{"sample_id": "conv-26", "conversation": {...}, "qa": [...]}`; a sample is named by its id without the
    `conv-` prefix, so conversation 26 has one name in either layout."""
    paths = sorted(where.glob("*.json")) if where.is_dir() else [where] if where.is_file() else []
    conversations: dict[str, Mapping[str, Any]] = {}
    for path in paths:
        conversations.update(conversations_in(path))
    if names:
        missing = [name for name in names if name not in conversations]
        if missing:
            raise SystemExit(f"no LoCoMo conversation {', '.join(missing)} at {where} "
                             f"(there: {', '.join(conversations) or 'none'})")
        conversations = {name: conversations[name] for name in names}
    if not conversations:
        raise SystemExit(f"no LoCoMo conversations at {where}; pass --locomo DIR")
    turns: list[Turn] = []
    questions: list[Question] = []
    for name, conversation in conversations.items():
        turns.extend(conversation_turns(name, conversation))
        questions.extend(conversation_questions(name, conversation))
    return turns, questions


def conversations_in(path: Path) -> dict[str, Mapping[str, Any]]:
    """The conversations one file holds, by name: itself, or each sample of the release's list."""
    held = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(held, Mapping):
        return {path.stem: held}
    if isinstance(held, list) and all(isinstance(sample, Mapping) and "conversation" in sample for sample in held):
        return {str(sample.get("sample_id", f"{path.stem}-{index}")).removeprefix("conv-"):
                {**sample["conversation"], "qa": sample.get("qa", [])} for index, sample in enumerate(held)}
    raise SystemExit(f"{path} holds neither a LoCoMo conversation nor the release's list of samples")


def conversation_turns(name: str, conversation: Mapping[str, Any]) -> Iterator[Turn]:
    """Each turn as the note text of the protocol, sessions in order."""
    sessions = sorted(int(match.group(1)) for key in conversation if (match := _SESSION_KEY.match(key)))
    for number in sessions:
        date = conversation.get(f"session_{number}_date_time", "")
        for turn in conversation[f"session_{number}"]:
            text = f"{turn['speaker']} ({date}): {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares a photo: {turn['blip_caption']}]"
            yield Turn(name, turn["dia_id"], text)


def conversation_questions(name: str, conversation: Mapping[str, Any]) -> Iterator[Question]:
    for qa in conversation["qa"]:
        if qa.get("category") not in CATEGORIES:
            continue
        evidence = tuple(dict.fromkeys(
            piece for entry in qa.get("evidence", []) for piece in re.split(r"[;,\s]+", str(entry))
            if _DIA_ID.match(piece)
        ))
        if evidence:
            yield Question(name, str(qa["question"]), int(qa["category"]), evidence)


def session_of(dia_id: str) -> str:
    return dia_id.split(":", 1)[0]


# --- metrics ----------------------------------------------------------------------------------------


def scores(ranked: Sequence[str], evidence: Sequence[str]) -> dict[str, float]:
    """hit@k, recall@k and session@k of one question's ranked distinct turns."""
    wanted = set(evidence)
    wanted_sessions = {session_of(dia_id) for dia_id in evidence}
    figures: dict[str, float] = {}
    for k in KS:
        top = set(ranked[:k])
        figures[f"hit@{k}"] = float(bool(top & wanted))
        figures[f"recall@{k}"] = len(top & wanted) / len(wanted)
        figures[f"session@{k}"] = float(bool({session_of(dia_id) for dia_id in top} & wanted_sessions))
    return figures


def means(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {key: round(statistics.fmean(row[key] for row in rows), 4) for key in rows[0]} if rows else {}


# --- through the API --------------------------------------------------------------------------------


def store(api: EngineApi, turns: Sequence[Turn]) -> float:
    """Post every turn as a note, wait until all are searchable; seconds taken (NaN when already stored).

    Other documents may be there (a corpus of files: memory beside it); notes of the memory collection must
    be these turns or none."""
    held = api.get(f"/documents?tag={MEMORY_TAG}&limit=1")["total"]
    if held >= len(turns):
        progress(f"the engine already holds {held} notes of {MEMORY_TAG}: not storing again")
        return float("nan")
    if held:
        raise SystemExit(f"the data directory holds {held} notes of {MEMORY_TAG}, not these turns: use a fresh one")
    others = api.get("/status")["documents"]["total"]
    if others:
        progress(f"storing the turns beside {others} other documents")
    started = time.perf_counter()
    for turn in turns:
        api.post("/jobs", {"text": turn.text, "tags": [MEMORY_TAG, f"locomo:{turn.conversation}"],
                           "source_path": f"locomo/{turn.conversation}/{turn.dia_id}"})
    while True:
        status = api.get("/status")
        if status["queue"]["queued"] + status["queue"]["running"] == 0:
            break
        time.sleep(0.2)
    if status["queue"]["failed"]:
        raise SystemExit(f"{status['queue']['failed']} note(s) failed")
    return time.perf_counter() - started


def dia_id_of(source_path: object) -> str | None:
    """`locomo/<conversation>/<dia_id>` back to the turn's id."""
    if not isinstance(source_path, str) or not source_path.startswith("locomo/"):
        return None
    return source_path.rsplit("/", 1)[-1]


def ask(api: EngineApi, questions: Sequence[Question], mode: str) -> tuple[list[list[str]], list[float]]:
    """Each question's distinct turns, best first, and the client round trip of each search (seconds)."""
    for question in questions[:10]:  # warm caches and code paths
        api.post("/search", {"query": question.text, "mode": mode, "top_n": TOP_N,
                             "tags": [f"locomo:{question.conversation}"]})
    ranked: list[list[str]] = []
    seconds: list[float] = []
    for question in questions:
        started = time.perf_counter()
        result = api.post("/search", {"query": question.text, "mode": mode, "top_n": TOP_N,
                                      "tags": [f"locomo:{question.conversation}"]})
        seconds.append(time.perf_counter() - started)
        if result["mode"] != mode:
            raise SystemExit(f"asked for {mode}, the engine answered in {result['mode']} (is the model loaded?)")
        found = (dia_id_of(hit.get("source_path")) for hit in result["results"])
        ranked.append(list(dict.fromkeys(dia_id for dia_id in found if dia_id is not None)))
    return ranked, seconds


# --- output -----------------------------------------------------------------------------------------


def report(questions: Sequence[Question], ranked: Sequence[Sequence[str]], seconds: Sequence[float],
           store_seconds: float, notes: int) -> dict[str, Any]:
    rows = [scores(turns, question.evidence) for question, turns in zip(questions, ranked, strict=True)]
    by_category = {f"{number} {name}": means([row for row, q in zip(rows, questions, strict=True)
                                               if q.category == number])
                   for number, name in CATEGORIES.items()}
    by_conversation = {name: means([row for row, q in zip(rows, questions, strict=True) if q.conversation == name])
                       for name in dict.fromkeys(q.conversation for q in questions)}
    ms = [s * 1000 for s in seconds]
    return {
        "questions": len(questions), "notes": notes,
        "overall": means(rows), "by_category": by_category, "by_conversation": by_conversation,
        "search_ms": {"p50": round(percentile(ms, 0.5), 2), "p95": round(percentile(ms, 0.95), 2)},
        "store_seconds": None if math.isnan(store_seconds) else round(store_seconds, 1),
    }


def print_table(figures: Mapping[str, Any]) -> None:
    columns = [f"{metric}@{k}" for metric in ("hit", "recall", "session") for k in KS]
    header = f"{'':>16} {'n':>4} " + " ".join(f"{column:>10}" for column in columns)
    print(header)
    print("-" * len(header))
    groups = {"all": (figures["questions"], figures["overall"])}
    counts = figures.get("counts", {})
    groups.update({name: (counts.get(name, ""), row) for name, row in figures["by_category"].items()})
    groups.update({f"conv {name}": (counts.get(name, ""), row) for name, row in figures["by_conversation"].items()})
    for name, (count, row) in groups.items():
        print(f"{name:>16} {count:>4} " + " ".join(f"{row.get(column, float('nan')):>10.3f}" for column in columns))
    latency = figures["search_ms"]
    print(f"search: p50 {latency['p50']} ms, p95 {latency['p95']} ms over {figures['questions']} questions")
    if figures["store_seconds"] is not None:
        print(f"store: {figures['notes']} notes in {figures['store_seconds']} s")


# --- main -------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    turns, questions = load(args.locomo, args.conversations.split(",") if args.conversations else None)
    env = engine_env(args.set)
    with benchmark_engine(args, env, "memory") as engine:
        api = EngineApi(engine.url)
        store_seconds = store(api, turns)
        ranked, seconds = ask(api, questions, args.mode)
    figures = report(questions, ranked, seconds, store_seconds, len(turns))
    figures["counts"] = {f"{number} {name}": sum(q.category == number for q in questions)
                         for number, name in CATEGORIES.items()}
    figures["counts"].update({name: sum(q.conversation == name for q in questions)
                              for name in figures["by_conversation"]})
    figures.update({"mode": args.mode, "engine_env": env, "machine": machine()})
    if args.runs:
        args.runs.write_text(json.dumps([
            {"conversation": q.conversation, "question": q.text, "category": q.category, "evidence": q.evidence,
             "ranked": turns_found} for q, turns_found in zip(questions, ranked, strict=True)], indent=1))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print_table(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
