// plumb serve against the official openai npm client: start the binary on a free loopback port
// with the tiny model, then chat (plain and streamed), stop, max_tokens, logprobs, tools,
// response_format, errors and auth. A server that does not start fails every test.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import OpenAI from 'openai';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const binary = process.env.PLUMB_BINARY ?? path.join(root, 'build/plumb');
const model = path.join(root, 'models/tiny-kjv');
const KEY = 'test-key';

let server, baseURL;

function startServer() {
  return new Promise((resolve) => {
    server = spawn(binary, ['serve', '--model', model, '--port', '0', '--api-key', KEY], { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    const onData = (d) => {
      log += d;
      const m = log.match(/ready on (http:\/\/[^\s]+)/);
      if (m) resolve({ url: m[1] });
    };
    server.stdout.on('data', onData);
    server.stderr.on('data', onData);
    server.on('exit', (code) => resolve({ exited: code, log }));
    server.on('error', (e) => resolve({ exited: -1, log: String(e) }));
  });
}

before(async () => {
  const r = await startServer();
  if (!r.url) throw new Error(`plumb serve (${binary}) did not start (exit ${r.exited}): ${r.log}`);
  baseURL = r.url + '/v1';
});

after(() => server?.kill('SIGTERM'));

const client = () => new OpenAI({ baseURL, apiKey: KEY, maxRetries: 0 });
const user = (content) => [{ role: 'user', content }];


test('chat, not streamed', async () => {
  const r = await client().chat.completions.create({ model: 'tiny-kjv', messages: user('In the beginning'), max_tokens: 8 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
});

test('chat, streamed, equals the same request not streamed (greedy)', async () => {
  const body = { model: 'tiny-kjv', messages: user('And God said'), max_tokens: 12, temperature: 0 };
  const whole = await client().chat.completions.create(body);
  const stream = await client().chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test('max_tokens and stop', async () => {
  const r = await client().chat.completions.create({ model: 'tiny-kjv', messages: user('In the beginning'), max_tokens: 3, temperature: 0 });
  assert.equal(r.usage.completion_tokens, 3);
  assert.equal(r.choices[0].finish_reason, 'length');
  const word = r.choices[0].message.content.trim().split(/\s+/)[0];
  const s = await client().chat.completions.create({ model: 'tiny-kjv', messages: user('In the beginning'), max_tokens: 3, temperature: 0, stop: [word] });
  assert.ok(!s.choices[0].message.content.includes(word));
});

test('logprobs', async () => {
  const r = await client().chat.completions.create({ model: 'tiny-kjv', messages: user('Light'), max_tokens: 4, logprobs: true, top_logprobs: 2 });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const e of lp) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 2);
  }
});

const verseTool = { type: 'function', function: { name: 'get_verse', parameters: { type: 'object', properties: { book: { type: 'string' } } } } };

test('tools are accepted and the answer is well-formed', async () => {
  const r = await client().chat.completions.create({ model: 'tiny-kjv', messages: user('Find Genesis'), tools: [verseTool], max_tokens: 16 });
  const c = r.choices[0];
  if (c.finish_reason === 'tool_calls') for (const call of c.message.tool_calls) JSON.parse(call.function.arguments);
  else assert.equal(typeof c.message.content, 'string');
});

test('a tool call and its result in the history', async () => {
  const messages = [
    ...user('Find Genesis 1:1'),
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_verse', arguments: '{"book":"Genesis"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'In the beginning God created the heaven and the earth.' },
  ];
  const r = await client().chat.completions.create({ model: 'tiny-kjv', messages, tools: [verseTool], max_tokens: 8 });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 20);  // the call and its result were rendered into the prompt
});

const verseSchema = { type: 'object', properties: { verse: { type: 'string' }, chapter: { type: 'integer' } }, required: ['verse'] };
const asSchema = (schema) => ({ type: 'json_schema', json_schema: { name: 'v', schema } });

test('response_format json_schema gives JSON matching the schema, within max_tokens', async () => {
  for (const max_tokens of [12, 24, 64]) {
    const r = await client().chat.completions.create({
      model: 'tiny-kjv', messages: user('A verse as JSON'), max_tokens, response_format: asSchema(verseSchema),
    });
    assert.equal(r.choices[0].finish_reason, 'stop', `max_tokens ${max_tokens}: ${r.choices[0].message.content}`);
    assert.ok(r.usage.completion_tokens <= max_tokens);
    const value = JSON.parse(r.choices[0].message.content);
    assert.equal(typeof value.verse, 'string');
    if ('chapter' in value) assert.ok(Number.isInteger(value.chapter));
  }
});

test('response_format streamed: the deltas join into the JSON', async () => {
  const stream = await client().chat.completions.create({
    model: 'tiny-kjv', messages: user('A verse as JSON'), max_tokens: 32, stream: true, response_format: asSchema(verseSchema),
  });
  let text = '', finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'stop');
  assert.equal(typeof JSON.parse(text).verse, 'string');
});

test('response_format json_object, and max_tokens below the shortest JSON ends with "length"', async () => {
  const r = await client().chat.completions.create({
    model: 'tiny-kjv', messages: user('JSON please'), max_tokens: 16, response_format: { type: 'json_object' },
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(typeof JSON.parse(r.choices[0].message.content), 'object');
  const short = await client().chat.completions.create({
    model: 'tiny-kjv', messages: user('A verse as JSON'), max_tokens: 1, response_format: asSchema(verseSchema),
  });
  assert.equal(short.choices[0].finish_reason, 'length');
  assert.equal(short.usage.completion_tokens, 1);
});

test('errors come back as OpenAI errors', async () => {
  await assert.rejects(client().chat.completions.create({ model: 'tiny-kjv', messages: user('x'), temperature: 9 }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === 'temperature');
  await assert.rejects(client().chat.completions.create({ model: 'nope', messages: user('x') }), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client().chat.completions.create({
    model: 'tiny-kjv', messages: user('x'), response_format: asSchema({ anyOf: [{ type: 'string' }] }),
  }), (e) => e.status === 400 && e.error?.param === 'response_format');
  await assert.rejects(client().chat.completions.create({ model: 'tiny-kjv', messages: [] }), (e) => e.status === 400);
});

test('auth', async () => {
  const wrong = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  const missing = await fetch(baseURL + '/models');
  assert.equal(missing.status, 401);
  assert.equal(typeof (await missing.json()).error.message, 'string');
  const models = await client().models.list();
  assert.equal(models.data[0].id, 'tiny-kjv');
});
