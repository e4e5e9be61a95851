"""The span head's teaching and reading (issue 59): where an answer's characters are in a
text, which word pieces the head learns to point at, and how a read's logits become the best
span and the null score. The texts here were written for this test."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from lectern_common import reading


@pytest.fixture(scope="module")
def bench(bench_import: Callable[[str], ModuleType]) -> tuple[ModuleType, ModuleType]:
    return bench_import("reading_data"), bench_import("train_reader")


@pytest.fixture(scope="module")
def tokenizer(bench: tuple[ModuleType, ModuleType]) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(bench[1].base_model_dir(), local_files_only=True)


def test_an_answer_is_located_as_whole_words_case_aside(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    data, _ = bench
    text = "Osmosis moves water. The membrane lets WATER through, not salt."
    assert data.locate(text, ["water through"]) == (39, 52)
    assert data.locate(text, ["sal", "salt"]) == (58, 62)  # "sal" is no whole word there
    assert data.locate(text, ["sugar"]) is None


def test_the_head_is_taught_the_answer_s_pieces_and_the_cls_for_none(
    bench: tuple[ModuleType, ModuleType], tokenizer: Any
) -> None:
    data, train = bench
    answer = "The xylem carries water up from the roots."
    group = data.Group(
        "What carries water up from the roots?",
        [answer, "Leaves make sugar in sunlight.", "Roots anchor the plant."],
        [1, 0, 0],
        "sentence",
        "test",
    )
    group.spans = [data.locate(answer, ["the xylem"]), None, None]
    targets = train.span_targets(tokenizer, [group], "sentence")
    ids = targets["inputs"]["input_ids"][0]
    start, end = int(targets["start"][0]), int(targets["end"][0])
    assert tokenizer.decode(ids[start : end + 1]) == "the xylem"
    assert targets["taught"].tolist() == [True, True, True]
    assert targets["start"][1:].tolist() == [0, 0] and targets["end"][1:].tolist() == [0, 0]
    # the question's pieces are never an answer; the [CLS] always may be
    allowed = targets["allowed"][0]
    assert bool(allowed[0]) and not bool(allowed[1])
    # an answering text whose answer was not found word for word teaches relevance alone
    group.spans = [None, None, None]
    assert train.span_targets(tokenizer, [group], "sentence")["taught"].tolist() == [
        False, True, True,
    ]  # fmt: skip
    # a source without spans teaches no span at all, and its loss is nothing
    group.spans = None
    untaught = train.span_targets(tokenizer, [group], "sentence")
    assert not bool(untaught["taught"].any())
    import torch

    size = untaught["allowed"].shape
    assert float(train.span_loss(torch.zeros(size), torch.zeros(size), untaught)) == 0.0


def test_the_span_loss_falls_as_the_head_points_at_the_answer(
    bench: tuple[ModuleType, ModuleType], tokenizer: Any
) -> None:
    import torch

    data, train = bench
    group = data.Group("Who wrote it?", ["Ada Lovelace wrote it in 1843."], [1], "sentence", "t")
    group.spans = [data.locate(group.texts[0], ["Ada Lovelace"])]
    targets = train.span_targets(tokenizer, [group], "sentence")
    size = targets["allowed"].shape
    flat = train.span_loss(torch.zeros(size), torch.zeros(size), targets)
    start, end = torch.zeros(size), torch.zeros(size)
    start[0, int(targets["start"][0])] = 8.0
    end[0, int(targets["end"][0])] = 8.0
    assert float(train.span_loss(start, end, targets)) < 0.01 < float(flat)


def test_the_distillation_loss_is_least_where_the_student_reads_as_the_teacher(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    """A student is pulled towards the teacher's scores and order, not only the labels: of
    two students that both rank the answer first, the one that also orders the near misses
    as the teacher does is closer, and a student at the teacher's logits is closest."""
    import torch

    data, train = bench
    groups = [
        data.Group("Q?", ["answer", "near miss", "far"], [1, 0, 0], "sentence", "t"),
        data.Group("Unanswerable?", ["close"], [0], "sentence", "t"),
    ]
    teacher = torch.tensor([4.0, 1.0, -3.0, -2.0])
    same = train.distillation_loss(teacher.clone(), teacher, groups)
    ordered = train.distillation_loss(torch.tensor([3.0, 0.5, -2.0, -2.0]), teacher, groups)
    swapped = train.distillation_loss(torch.tensor([3.0, -2.0, 0.5, -2.0]), teacher, groups)
    assert float(same) < float(ordered) < float(swapped)
    # the listwise part vanishes at the teacher's logits: what is left is the pointwise part
    pointwise = torch.nn.functional.binary_cross_entropy_with_logits(
        teacher, torch.sigmoid(teacher)
    )
    assert float(same) == pytest.approx(float(pointwise), abs=1e-6)


def _logits(size: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(size, -5.0, dtype=np.float32), np.full(size, -5.0, dtype=np.float32)


def test_a_read_becomes_the_best_span_and_the_null_score() -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(reading.PACKAGED / "tokenizer.json"))
    text = "Mitochondria release energy from glucose during respiration."
    encoding = tokenizer.encode("What releases energy?", text)
    pieces = [i for i, s in enumerate(encoding.sequence_ids) if s == 1]
    start, end = _logits(len(encoding.ids))
    start[0], end[0] = 1.0, 1.0  # "no answer here" scores 2
    start[pieces[0]], end[pieces[2]] = 4.0, 3.0
    start[1], end[2] = 9.0, 9.0  # the question's pieces never hold an answer
    found = reading.best_span(0.5, start, end, encoding)
    offsets = encoding.offsets
    assert (found.start, found.end) == (offsets[pieces[0]][0], offsets[pieces[2]][1])
    assert found.start == 0 and text[found.start : found.end] == "Mitochond"  # 3 pieces
    assert found.span_score == pytest.approx(7.0) and found.null_score == pytest.approx(2.0)
    assert found.margin == pytest.approx(5.0) and found.logit == 0.5


def test_a_span_is_never_longer_than_the_longest_answer() -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(reading.PACKAGED / "tokenizer.json"))
    text = " ".join(f"word{n}" for n in range(60))
    encoding = tokenizer.encode("Which word?", text)
    pieces = [i for i, s in enumerate(encoding.sequence_ids) if s == 1]
    assert len(pieces) > reading.LONGEST_SPAN + 5
    start, end = _logits(len(encoding.ids))
    start[pieces[0]] = 4.0
    end[pieces[3]] = 1.0
    end[pieces[reading.LONGEST_SPAN + 2]] = 9.0  # higher, but too far from any start
    found = reading.best_span(0.0, start, end, encoding)
    assert found.span_score == pytest.approx(5.0)
    assert (found.start, found.end) == (0, encoding.offsets[pieces[3]][1])


def test_a_reader_without_a_span_head_reads_logits_alone() -> None:
    reader = reading.Reader.load()
    if reader.spans:
        pytest.skip("the packaged reader has a span head")
    [read] = reader.read("What does amylase break down?", ["Amylase breaks down starch."])
    assert read.start is None and read.margin is None
    assert read.logit == pytest.approx(
        float(reader.logits("What does amylase break down?", ["Amylase breaks down starch."])[0])
    )


def test_training_autocasts_to_bfloat16_only_where_the_cpu_has_it(
    bench: tuple[ModuleType, ModuleType],
) -> None:
    """Emulated bfloat16 made a training step 16 times slower than float32 on an AVX2-only
    CPU: autocast follows what oneDNN says the CPU does, and ``--float32`` always wins."""
    import torch

    _, train = bench
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert train.autocast_bfloat16(False) is native
    assert train.autocast_bfloat16(True) is False


def test_a_run_s_checkpoint_is_measured_as_the_reader_it_would_be(
    bench: tuple[ModuleType, ModuleType], tmp_path: Any
) -> None:
    """``snapshot`` turns a run's last checkpoint into a trained folder and ``export
    --final`` makes it a reader folder: the services read it as the checkpoint's weights
    read in torch (a 1-layer span reader here, its heads perturbed so they are not the
    base's)."""
    import argparse

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    _, train = bench
    base = train.base_model_dir()
    model = AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=1, local_files_only=True
    )
    train.keep_bottom_layers(model, 1)
    model = train.with_span_head(model)
    torch.manual_seed(3)
    with torch.no_grad():
        for parameter in model.span.parameters():
            parameter.normal_()
    work = tmp_path / "run"
    work.mkdir()
    plan = "seed=13 epochs=1 steps=10 lr=4e-05 layers=1 spans"
    torch.save({"model": model.state_dict(), "step": 7, "plan": plan}, work / "checkpoint.pt")
    train.snapshot(argparse.Namespace(work=work))
    folder = work / "snapshot-7"
    assert (folder / train.SPAN_HEAD).is_file()
    out = tmp_path / "reader"
    train.export(argparse.Namespace(work=work, final=folder, out=out, fp32=True))
    reader = reading.Reader.load(out)
    assert reader.spans and reader.card.name == "lectern-reader-minilm-l1-spans"
    question, text = "Who wrote it?", "Ada Lovelace wrote it in 1843."
    [read] = reader.read(question, [text])
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    model.eval()
    with torch.no_grad():
        logit, start, end = model(**tokenizer([question], [text], return_tensors="pt"))
    assert read.logit == pytest.approx(float(logit[0]), abs=1e-3)
    assert read.null_score == pytest.approx(float(start[0, 0] + end[0, 0]), abs=1e-3)
