// A conversation made to fit a model's context: the engine's side of compiler/app/conversation.py,
// with the same rules and messages.
//
// When a conversation no longer fits, its oldest turns are left out, the system prompt kept, and the
// reply says so (usage.extra.dropped_messages and usage.extra.notice), as Ollama and llama.cpp's
// server do. A turn starts at a user message, so what remains still starts with one. The reply gets
// room too: the prompt is cut to leave min(max_tokens, context_length / 2) positions for it where
// dropping turns can, and it must leave one at least.

export class ChatError extends Error {
  name = "ChatError";
}

/** ``maxTokens`` as a number of tokens to generate, at least one; ChatError otherwise. @param {unknown} maxTokens */
export function checkMaxTokens(maxTokens) {
  if (!Number.isInteger(maxTokens) || /** @type {number} */ (maxTokens) < 1) {
    throw new ChatError(`max_tokens must be a whole number of at least 1, not ${JSON.stringify(maxTokens) ?? String(maxTokens)}`);
  }
  return /** @type {number} */ (maxTokens);
}

/**
 * A conversation: a non-empty array of {role, content} (strings) whose last message (the prompt) has
 * some text; ChatError otherwise.
 * @param {unknown} messages @returns {{role: string, content: string}[]}
 */
export function checkMessages(messages) {
  if (!Array.isArray(messages) || !messages.length) {
    throw new ChatError("the conversation has no messages (messages must be a non-empty array)");
  }
  messages.forEach((message, index) => {
    if (!message || typeof message.role !== "string" || !message.role || typeof message.content !== "string") {
      throw new ChatError(`message ${index} is not an object with a role and a content, both strings`);
    }
  });
  if (!messages.at(-1).content.trim()) throw new ChatError("the prompt is empty: the last message has no text");
  return messages;
}

/**
 * What to tell the user when ``dropped`` messages were left out; null when none were.
 * @param {number} dropped @param {number} contextLength @param {boolean} systemKept
 */
export function droppedNotice(dropped, contextLength, systemKept) {
  if (!dropped) return null;
  const left = dropped === 1 ? "the oldest message was" : `the ${dropped} oldest messages were`;
  return `the conversation no longer fits the model's context of ${contextLength} tokens: ${left} left out` +
    (systemKept ? " (the system prompt is kept)" : "");
}

/**
 * ``messages`` made to fit ``contextLength`` tokens with room for the reply: the oldest turns after the
 * system prompt are left out until ``encode`` (the chat template and tokenizer) gives few enough
 * tokens. ChatError when even the system prompt and the last turn do not fit.
 * @param {{role: string, content: string}[]} messages
 * @param {(messages: {role: string, content: string}[]) => number[]} encode
 * @param {number} contextLength @param {number} maxTokens
 * @returns {{messages: {role: string, content: string}[], promptIds: number[], dropped: number, notice: string | null}}
 */
export function fitConversation(messages, encode, contextLength, maxTokens) {
  checkMessages(messages);
  checkMaxTokens(maxTokens);
  let head = 0;
  while (head < messages.length - 1 && messages[head].role === "system") head += 1;
  // Where the kept part may start: the first message after the system prompt, or a later user message.
  const every = [head];
  for (let i = head + 1; i < messages.length; i++) if (messages[i].role === "user") every.push(i);
  // A message costs a token at least: a start more than contextLength messages back cannot fit, and is
  // left out before anything is rendered (a long history costs no more than a context's worth of it).
  const reachable = every.filter((i) => messages.length - i <= contextLength);
  const starts = reachable.length ? reachable : every.slice(-1);
  const room = contextLength - Math.min(maxTokens, Math.floor(contextLength / 2));  // the reply's room left
  const limit = contextLength - 1;  // the most a prompt may have: one position for the reply at least
  const kept = (/** @type {number} */ start) => {
    const chosen = [...messages.slice(0, head), ...messages.slice(start)];
    return { chosen, ids: encode(chosen) };
  };
  let best = kept(starts[0]);
  if (best.ids.length > room && starts.length > 1) {
    // The fewest turns left out that leave the reply its room (each turn left out takes tokens away);
    // when no number does, all turns but the last.
    let low = 1, high = starts.length - 1;
    best = kept(starts[high]);
    if (best.ids.length <= room) {
      while (low < high) {  // best is kept(starts[high]), and fits
        const middle = Math.floor((low + high) / 2);
        const candidate = kept(starts[middle]);
        if (candidate.ids.length <= room) [high, best] = [middle, candidate];
        else low = middle + 1;
      }
    }
  }
  if (!best.ids.length) throw new ChatError("the prompt is empty once laid out by the chat template and tokenized");
  if (best.ids.length > limit) {
    throw new ChatError(`the prompt has ${best.ids.length} tokens; the context window is ${contextLength} (with room ` +
      `for one reply token), even with only its last turn${head ? " and the system prompt" : ""}: shorten the ` +
      "message, or use a build with a larger context (--context)");
  }
  const dropped = messages.length - best.chosen.length;
  return { messages: best.chosen, promptIds: best.ids, dropped, notice: droppedNotice(dropped, contextLength, head > 0) };
}

/**
 * Why a build cannot serve its chat config: chat-config.json's context_length past the context its
 * executable was compiled for (the upper bound of ``total`` in the functions of the prefill and decode roles,
 * as its program section names them); null when it can.
 * @param {any} executable @param {any} chatConfig @returns {string | null}
 */
export function contextMisfit(executable, chatConfig) {
  const functions = chatConfig.program?.functions ?? {};
  const bounds = [functions.prefill, functions.decode].map((name) => executable?.functions?.[name]?.symbols?.total?.upper_bound)
    .filter((bound) => Number.isInteger(bound));
  if (!bounds.length) return null;
  const compiled = Math.min(...bounds);
  const asked = chatConfig.context_length;
  return asked > compiled ? `chat-config.json asks for a context of ${asked} tokens, but this build was compiled for ` +
    `${compiled}: recompile with --context ${asked}, or set context_length to at most ${compiled}` : null;
}
