// A small completion server over llama.cpp (node-llama-cpp, CPU build) for
// drafter's tests: it serves one GGUF model with the two layouts drafter's
// completions client reads from llama.cpp-based engines:
//
//   POST /v1/completions  OpenAI completions, prompt as a list of token ids;
//                         "return_token_ids": true adds choices[0].token_ids
//                         (vLLM's layout), unless --text-only is given.
//   POST /completion      llama-server's native layout: "return_tokens": true
//                         adds "tokens", "stop_type" is eos or limit.
//   GET  /v1/models       the served model name.
//
// Usage: node server.mjs --model FILE.gguf [--port 0] [--name NAME]
//        [--parallel 1] [--context 2048] [--threads 1] [--text-only]
//
// Once ready it prints one line to stdout: {"listening": "http://127.0.0.1:PORT"}.
// Generation stops at the first stop_token_ids id or end-of-generation token
// of the model (returned as the last id, as vLLM and llama-server do), or
// after max_tokens (n_predict) tokens.
import http from "node:http";
import { parseArgs } from "node:util";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const { values: args } = parseArgs({
  options: {
    model: { type: "string" },
    port: { type: "string", default: "0" },
    host: { type: "string", default: "127.0.0.1" },
    name: { type: "string", default: "" },
    parallel: { type: "string", default: "1" },
    context: { type: "string", default: "2048" },
    threads: { type: "string", default: "1" },
    "text-only": { type: "boolean", default: false },
  },
});
if (!args.model) {
  console.error("usage: node server.mjs --model FILE.gguf [--port N] [--name NAME] [--parallel N] [--context N] [--threads N] [--text-only]");
  process.exit(2);
}
const name = args.name || args.model.replace(/^.*\//, "").replace(/\.gguf$/, "");
const parallel = Number(args.parallel);
const contextSize = Number(args.context);

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.warn });
const model = await llama.loadModel({ modelPath: args.model });
const context = await model.createContext({ contextSize, sequences: parallel, threads: Number(args.threads) });
const vocabSize = model.fileInfo.metadata?.llama?.vocab_size ?? model.tokens.vocabularySize ?? 0;

// A pool of context sequences: a request waits for a free one.
const free = [];
for (let i = 0; i < parallel; i++) free.push(context.getSequence());
const waiting = [];
async function acquire() {
  if (free.length > 0) return free.pop();
  return new Promise((resolve) => waiting.push(resolve));
}
function release(seq) {
  const next = waiting.shift();
  if (next) next(seq);
  else free.push(seq);
}

class HTTPError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function num(body, key, fallback) {
  const v = body[key];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== "number" || !Number.isFinite(v)) throw new HTTPError(400, `${key} must be a number, got ${JSON.stringify(v)}`);
  return v;
}

// generate runs one request on a free sequence and returns the ids (the stop
// id included) and whether it stopped at a stop id.
async function generate(prompt, maxTokens, sampling, stopIDs) {
  if (!Array.isArray(prompt) || prompt.length === 0 || !prompt.every((t) => Number.isInteger(t) && t >= 0 && (!vocabSize || t < vocabSize))) {
    throw new HTTPError(400, "prompt must be a non-empty list of token ids of the model's vocabulary");
  }
  if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new HTTPError(400, `max_tokens must be at least 1, got ${maxTokens}`);
  if (prompt.length + maxTokens > contextSize) {
    throw new HTTPError(400, `This model's maximum context length is ${contextSize} tokens. However, you requested ${prompt.length + maxTokens} tokens (${prompt.length} in the messages, ${maxTokens} in the completion). Please reduce the length of the messages or completion.`);
  }
  const seq = await acquire();
  try {
    await seq.clearHistory();
    const ids = [];
    let stopped = false;
    const options = {
      temperature: sampling.temperature,
      topK: sampling.topK > 0 ? sampling.topK : 0,
      topP: sampling.topP > 0 && sampling.topP < 1 ? sampling.topP : undefined,
      minP: sampling.minP > 0 ? sampling.minP : undefined,
      seed: sampling.seed,
      yieldEogToken: true,
    };
    for await (const token of seq.evaluate(prompt, options)) {
      ids.push(token);
      if (stopIDs.includes(token) || model.isEogToken(token)) {
        stopped = true;
        break;
      }
      if (ids.length >= maxTokens) break;
    }
    return { ids, stopped };
  } finally {
    release(seq);
  }
}

// text is the answer's text in the context of the prompt (so that a leading
// space survives, as engines detokenize), end-of-generation tokens left out.
function text(prompt, ids) {
  return model.detokenize(ids.filter((t) => !model.isEogToken(t)), false, prompt);
}

async function completions(body) {
  if (body.model !== undefined && body.model !== name) throw new HTTPError(404, `The model \`${body.model}\` does not exist.`);
  const stopIDs = Array.isArray(body.stop_token_ids) ? body.stop_token_ids : [];
  const sampling = { temperature: num(body, "temperature", 1), topP: num(body, "top_p", 1), topK: num(body, "top_k", 0), minP: num(body, "min_p", 0), seed: num(body, "seed", 0) };
  const { ids, stopped } = await generate(body.prompt, num(body, "max_tokens", 16), sampling, stopIDs);
  const last = ids[ids.length - 1];
  const choice = {
    index: 0,
    text: text(body.prompt, ids),
    logprobs: null,
    finish_reason: stopped ? "stop" : "length",
    stop_reason: stopped && !model.isEogToken(last) ? last : null,
  };
  if (body.return_token_ids && !args["text-only"]) choice.token_ids = ids;
  return {
    id: `cmpl-${Date.now()}`,
    object: "text_completion",
    created: Math.floor(Date.now() / 1000),
    model: name,
    choices: [choice],
    usage: { prompt_tokens: body.prompt.length, completion_tokens: ids.length, total_tokens: body.prompt.length + ids.length },
  };
}

async function nativeCompletion(body) {
  const sampling = { temperature: num(body, "temperature", 0.8), topP: num(body, "top_p", 0.95), topK: num(body, "top_k", 40), minP: num(body, "min_p", 0.05), seed: num(body, "seed", 0) };
  const { ids, stopped } = await generate(body.prompt, num(body, "n_predict", 16), sampling, []);
  const out = { index: 0, content: text(body.prompt, ids), id_slot: 0, stop: true, model: name, tokens_predicted: ids.length, tokens_evaluated: body.prompt.length, stop_type: stopped ? "eos" : "limit", stopping_word: "" };
  if (body.return_tokens) out.tokens = ids;
  return out;
}

function send(res, status, obj) {
  const b = JSON.stringify(obj);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(b) });
  res.end(b);
}

const server = http.createServer(async (req, res) => {
  try {
    if (req.method === "GET" && req.url === "/v1/models") {
      return send(res, 200, { object: "list", data: [{ id: name, object: "model", owned_by: "node-llama-cpp" }] });
    }
    if (req.method === "GET" && req.url === "/health") return send(res, 200, { status: "ok" });
    if (req.method !== "POST" || (req.url !== "/v1/completions" && req.url !== "/completion")) throw new HTTPError(404, `Not Found: ${req.method} ${req.url}`);
    let raw = "";
    for await (const chunk of req) raw += chunk;
    let body;
    try {
      body = JSON.parse(raw);
    } catch (e) {
      throw new HTTPError(400, `invalid JSON body: ${e.message}`);
    }
    send(res, 200, req.url === "/completion" ? await nativeCompletion(body) : await completions(body));
  } catch (e) {
    const status = e instanceof HTTPError ? e.status : 500;
    send(res, status, { error: { message: e.message, type: status === 404 ? "NotFoundError" : "BadRequestError", code: status } });
  }
});
server.listen(Number(args.port), args.host, () => {
  const { port } = server.address();
  console.log(JSON.stringify({ listening: `http://${args.host}:${port}` }));
});
const stop = () => server.close(() => process.exit(0));
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
