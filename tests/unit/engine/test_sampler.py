"""Token choice from logits: greedy, seeded randomness, top-k, top-p, temperature."""

from __future__ import annotations

import math

import torch

from vigil.engine.request import SamplingParams
from vigil.engine.sampler import make_generator, sample

CPU = torch.device("cpu")


def params(**kwargs: float | int) -> SamplingParams:
    return SamplingParams(max_tokens=16, **kwargs)  # type: ignore[arg-type]


def draws(logits: torch.Tensor, p: SamplingParams, seed: int, n: int) -> list[int]:
    """n tokens drawn from one logits row with one seeded generator."""
    gen = make_generator(seed, CPU)
    return [sample(logits[None], [p], [gen]).token_ids[0] for _ in range(n)]


def random_logits(rows: int, vocab: int = 50, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def test_greedy_is_argmax() -> None:
    logits = random_logits(6)
    tokens = sample(logits, [params(temperature=0.0)] * 6, [None] * 6).token_ids
    assert tokens == logits.argmax(-1).tolist()


def test_greedy_rows_need_no_generator_beside_random_rows() -> None:
    logits = random_logits(3)
    mixed = [params(temperature=0.0), params(temperature=1.0), params(top_k=1)]
    tokens = sample(logits, mixed, [None, make_generator(7, CPU), None]).token_ids
    assert tokens[0] == int(logits[0].argmax()) and tokens[2] == int(logits[2].argmax())


def test_same_seed_draws_the_same_tokens() -> None:
    logits = random_logits(1, seed=1)[0] / 3  # flat enough that draws vary
    p = params(temperature=1.0)
    first = draws(logits, p, seed=123, n=40)
    assert first == draws(logits, p, seed=123, n=40)
    assert len(set(first)) > 5  # it really is random, not stuck on one token


def test_different_seeds_draw_different_tokens() -> None:
    logits = random_logits(1, seed=1)[0] / 3
    p = params(temperature=1.0)
    sequences = {tuple(draws(logits, p, seed=seed, n=20)) for seed in range(5)}
    assert len(sequences) == 5


def test_seeded_row_draws_the_same_whatever_shares_its_batch() -> None:
    logits = random_logits(3, seed=2)
    p = params(temperature=1.0)
    alone = draws(logits[1], p, seed=9, n=20)
    gens = [make_generator(1, CPU), make_generator(9, CPU), make_generator(2, CPU)]
    batched = [sample(logits, [p] * 3, gens).token_ids[1] for _ in range(20)]
    assert batched == alone


def test_top_k_1_behaves_as_greedy() -> None:
    logits = random_logits(1, seed=3)[0]
    assert set(draws(logits, params(temperature=1.5, top_k=1), seed=0, n=50)) == {
        int(logits.argmax())
    }


def test_top_k_draws_only_from_the_k_best() -> None:
    logits = random_logits(1, seed=4)[0] / 3
    best = set(logits.topk(3).indices.tolist())
    drawn = draws(logits, params(temperature=1.0, top_k=3), seed=0, n=300)
    assert set(drawn) == best  # all three appear, nothing else does


def test_tiny_top_p_keeps_only_the_top_token() -> None:
    logits = random_logits(1, seed=5)[0] / 3
    drawn = draws(logits, params(temperature=1.0, top_p=1e-6), seed=0, n=100)
    assert set(drawn) == {int(logits.argmax())}


def test_top_p_below_float32_range_still_keeps_the_top_token() -> None:
    # Found by fuzzing the API: top_p=5e-324 is > 0, so valid, but 0 in float32.
    logits = random_logits(1, seed=5)[0] / 3
    drawn = draws(logits, params(temperature=1.0, top_p=5e-324), seed=0, n=20)
    assert set(drawn) == {int(logits.argmax())}


def test_top_p_keeps_the_smallest_set_that_covers_p() -> None:
    # Probabilities 0.5, 0.3, 0.15, 0.05: top_p=0.7 needs the first two, and only them.
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05]).log()
    drawn = draws(logits, params(temperature=1.0, top_p=0.7), seed=0, n=300)
    assert set(drawn) == {0, 1}
    assert abs(drawn.count(0) / 300 - 0.5 / 0.8) < 0.08  # renormalised over the two


def test_temperature_scales_logits_before_softmax() -> None:
    # Probabilities 1/7, 2/7, 4/7 at temperature 1; at temperature 2 they go as the square
    # roots. Seeded, so the empirical frequencies are the same on every run.
    logits = torch.tensor([0.0, math.log(2), math.log(4)])
    n = 4000
    for temperature in (1.0, 2.0):
        expected = (logits / temperature).softmax(-1)
        drawn = draws(logits, params(temperature=temperature), seed=11, n=n)
        observed = torch.tensor([drawn.count(t) / n for t in range(3)])
        assert (observed - expected).abs().max() < 0.03, (temperature, observed, expected)


def test_low_temperature_concentrates_and_high_temperature_spreads() -> None:
    logits = random_logits(1, seed=6)[0]
    cold = draws(logits, params(temperature=0.05), seed=0, n=100)
    hot = draws(logits, params(temperature=100.0), seed=0, n=100)
    assert set(cold) == {int(logits.argmax())}
    assert len(set(hot)) > 30  # close to uniform over 50 tokens


def test_temperature_below_float32_range_behaves_as_greedy() -> None:
    logits = random_logits(1, seed=7)[0]
    for temperature in (1e-40, 5e-324):
        drawn = draws(logits, params(temperature=temperature), seed=0, n=20)
        assert set(drawn) == {int(logits.argmax())}, temperature
