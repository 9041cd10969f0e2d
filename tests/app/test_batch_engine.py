"""Continuous batching (issue 17 item 2): `tessera serve --max-batch B`'s engine decodes up to B
requests as one step over a paged KV cache; a request that arrives joins between steps, one that
finishes leaves without stopping the others, and each reply equals the same request's reply alone.

The tiny random-weight model: a batched build beside the chat build of the same file, for llvmpipe
and WASM (the Python VM) and the CPU (runtime-native). Each batched reply equals the chat session's
reply to the same request: the batched GEMMs and the paged attention give each row what the chat
build's GEMVs and contiguous cache give it (on WASM and the CPU both decode with 8-bit activations,
Target.quantized_activations, through the same micro-kernels), and it equals the batched engine's own
reply to that request alone.
"""

import asyncio
import time

import numpy as np
import pytest
from tessera.app.batch_engine import BatchBuildError, BatchEngine, PagedModel, PagePool
from tessera.app.chat import ChatError, ChatSession, NativeChatSession, Sampling
from tessera.app.compile import cached_compile
from tessera.app.engine import Failed, Finished, Generation, Piece

CONTEXT = 128
BATCH = 4
PROMPTS = ["Hello there", "What is the capital of France?", "Tell me a story.", "How do magnets work?",
           "Name a color.", "Why?"]
LENGTHS = [12, 30, 5, 21, 1, 17]


def generations():
    return [Generation([{"role": "user", "content": p}], n) for p, n in zip(PROMPTS, LENGTHS)]


async def run_all(engine, batch, stagger=0.0):
    """Every generation submitted (``stagger`` seconds apart), then awaited: (text, completion) each."""
    async def one(generation):
        handle = engine.submit(generation)
        text = ""
        while True:
            event = await handle.next_event()
            if isinstance(event, Piece):
                text += event.text
            elif isinstance(event, Finished):
                return text, event.completion
            else:
                raise AssertionError(f"failed: {event.error}")

    tasks = []
    for generation in batch:
        tasks.append(asyncio.ensure_future(one(generation)))
        await asyncio.sleep(stagger)
    return await asyncio.gather(*tasks)


def serve(model, batch, stagger=0.0, max_queue=8):
    async def main():
        engine = BatchEngine(model, "tiny", max_queue=max_queue)
        try:
            return await run_all(engine, batch, stagger), engine
        finally:
            engine.close()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def builds(tiny_gguf):
    return {name: cached_compile(tiny_gguf, target, CONTEXT, max_batch=batch)
            for name, target, batch in (("batched-llvmpipe", "llvmpipe", BATCH), ("llvmpipe", "llvmpipe", 1),
                                        ("batched-wasm", "wasm", BATCH), ("wasm", "wasm", 1),
                                        ("batched-cpu", "cpu", BATCH), ("cpu", "cpu", 1))}


@pytest.mark.parametrize("target,runtime", [("llvmpipe", "python"), ("wasm", "python"), ("cpu", "native")])
def test_batched_replies_equal_the_chat_sessions(builds, target, runtime):
    """Six requests at once through four rows: two wait, then join as others finish (their prefill between
    decode steps); every reply and its usage equal the chat session's reply to the same request."""
    results, engine = serve(PagedModel(builds[f"batched-{target}"], runtime), generations())
    session = ChatSession(builds[target]) if runtime == "python" else NativeChatSession(builds[target])
    for generation, (text, completion) in zip(generations(), results):
        session.reset()
        alone = session.reply(generation.messages, generation.max_tokens, Sampling())
        assert text == completion.text == alone["reply"]
        assert (completion.prompt_tokens, completion.completion_tokens) == (alone["prompt_tokens"],
                                                                           alone["completion_tokens"])
        assert completion.finish_reason == ("length" if alone["completion_tokens"] == generation.max_tokens
                                            else "stop")
    assert engine.widest_step == BATCH  # the rows really decoded together
    assert engine.pages.free == engine.max_batch * engine.model.pages_per_sequence  # every page given back


def test_a_conversation_continues_from_its_remembered_pages(builds):
    """The second turn of a conversation (its first turn and reply resent, as clients do) finds the pages
    of the first in the prefix cache, computes only the rest, and says so in its usage; its reply is the
    chat session's."""
    model = PagedModel(builds["batched-wasm"])
    first = Generation([{"role": "user", "content": "Tell me a story."}], 20)

    async def main():
        engine = BatchEngine(model, "tiny")
        try:
            ((text, done),) = await run_all(engine, [first])
            second = Generation(first.messages + [{"role": "assistant", "content": text},
                                                  {"role": "user", "content": "And then?"}], 12)
            return second, done, (await run_all(engine, [second]))[0]
        finally:
            engine.close()

    second, done, (text, completion) = asyncio.run(main())
    assert completion.cached_tokens >= done.prompt_tokens - model.page_size > 0
    assert completion.cached_tokens % model.page_size == 0
    session = ChatSession(builds["wasm"])
    alone = session.reply(second.messages, second.max_tokens, Sampling())
    assert text == alone["reply"] and completion.prompt_tokens == alone["prompt_tokens"]


@pytest.mark.parametrize("build,runtime", [("batched-wasm", "python"), ("batched-cpu", "native")])
def test_a_reply_does_not_depend_on_the_rest_of_the_batch(builds, build, runtime):
    """Each request of a batch gets the reply it gets alone, on the Python VM's WASM kernels and on
    runtime-native."""
    model = PagedModel(builds[build], runtime)
    together, engine = serve(model, generations())
    assert engine.widest_step > 1
    for generation, result in zip(generations(), together):
        (alone,), _ = serve(model, [generation])
        assert result[0] == alone[0] and result[1].completion_tokens == alone[1].completion_tokens


def test_a_cancelled_request_leaves_and_the_others_go_on(builds):
    model = PagedModel(builds["batched-wasm"])

    async def main():
        engine = BatchEngine(model, "tiny")
        try:
            long = engine.submit(Generation([{"role": "user", "content": "Tell me a story."}], 100))
            short = engine.submit(Generation([{"role": "user", "content": "Why?"}], 10))
            await long.next_event()
            long.cancel()
            events = [await short.next_event()]
            while not isinstance(events[-1], Finished | Failed):
                events.append(await short.next_event())
            # The engine's thread updates its load after the Finished it sent: wait for it, with a guard
            # against a hang (not a time it must keep) that the assertions below then report.
            deadline = time.monotonic() + 120
            while engine.load()["running"] and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return events, engine.load(), engine.pages.free
        finally:
            engine.close()

    events, load, free = asyncio.run(main())
    assert isinstance(events[-1], Finished) and events[-1].completion.completion_tokens == 10
    assert load["running"] == 0 and free == BATCH * model.pages_per_sequence


def test_bad_requests_fail_alone(builds):
    """A prompt longer than the context and max_tokens < 1 fail with a clear error; the request beside
    them is answered."""
    model = PagedModel(builds["batched-wasm"])

    async def main():
        engine = BatchEngine(model, "tiny")
        try:
            handles = [engine.submit(Generation([{"role": "user", "content": "word " * 400}], 5)),
                       engine.submit(Generation([{"role": "user", "content": "Hi"}], 0)),
                       engine.submit(Generation([{"role": "user", "content": "Hi"}], 3))]
            outcomes = []
            for handle in handles:
                event = await handle.next_event()
                while isinstance(event, Piece):
                    event = await handle.next_event()
                outcomes.append(event)
            return outcomes
        finally:
            engine.close()

    too_long, no_tokens, fine = asyncio.run(main())
    assert isinstance(too_long, Failed) and "context" in str(too_long.error)
    assert isinstance(no_tokens, Failed) and "max_tokens" in str(no_tokens.error)
    assert isinstance(fine, Finished) and fine.completion.completion_tokens == 3


def test_a_batched_build_is_refused_by_the_chat_session_and_a_chat_build_by_the_batch_engine(builds):
    with pytest.raises(ChatError, match="batched build.*tessera serve --max-batch"):
        ChatSession(builds["batched-wasm"])
    with pytest.raises(BatchBuildError, match="not a batched build"):
        PagedModel(builds["llvmpipe"])


def test_pages_are_handed_out_one_at_a_time_and_given_back():
    pages = PagePool(3, 4)
    held = [pages.take(), pages.take()]
    assert held == [0, 1] and pages.free == 1
    pages.give_back(held)
    assert held == [] and pages.free == 3 and pages.remembered == 0
    assert sorted(pages.take() for _ in range(3)) == [0, 1, 2]
    with pytest.raises(ChatError, match="no free page"):
        pages.take()


def test_full_pages_are_remembered_shared_and_evicted_last_used_first():
    """A request's full pages are found again by a prompt that starts with the same tokens (never its
    last token), shared while held, and evicted, tail before head, only when no free page is left."""
    pages = PagePool(6, 4)
    first = [pages.take() for _ in range(3)]
    pages.give_back(first, tokens=list(range(10)))  # pages 0 and 1 full: remembered; page 2 freed
    assert pages.remembered == 2 and pages.free == 6
    assert pages.match(list(range(8))) == [0]  # the whole of page 1 would leave no token to compute
    pages.give_back([0])
    shared = pages.match(list(range(9)) + [99])
    assert shared == [0, 1]
    other = pages.match([0, 1, 2, 3, 7, 7, 7, 7, 7])  # the same first page only
    assert other == [0] and pages.free == 4
    assert pages.match([5, 1, 2, 3, 4, 5, 6, 7, 8]) == []
    pages.give_back(other)
    pages.give_back(shared, tokens=list(range(9)) + [99])  # held pages stay remembered, nothing twice
    assert pages.remembered == 2 and pages.free == 6
    taken = [pages.take() for _ in range(5)]  # four free pages, then the tail of the prefix
    assert sorted(taken[:4]) == [2, 3, 4, 5] and taken[4] == 1 and pages.remembered == 1
    assert pages.match(list(range(9)) + [99]) == [0]


def test_sampled_replies_follow_their_seed(builds):
    """Temperature sampling on the host with the sampler's own rules: the same seed, the same reply,
    whatever else is in the batch."""
    model = PagedModel(builds["batched-wasm"])
    sampled = [Generation([{"role": "user", "content": p}], 12, Sampling(temperature=0.9, top_p=0.9, seed=7))
               for p in PROMPTS[:3]]
    together, _ = serve(model, sampled)
    (alone,), _ = serve(model, sampled[1:2])
    assert together[1][0] == alone[0]
    assert len({text for text, _ in together}) > 1
    assert np.all([c.completion_tokens > 0 for _, c in together])
