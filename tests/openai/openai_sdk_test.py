"""The router's OpenAI-compatible HTTP API (docs/design.md, HTTP API) driven by the official `openai` Python
SDK, a client nobody here wrote: completions and chat, streaming and not, n, logprobs, echo scoring
against the gRPC Score, stop strings, our extension fields, usage, structured outputs, tool calls
(routers with each template family's chat template), and errors raised as the SDK's own exception
types with our messages. Greedy completions are compared token by token with the gRPC
Generate path (yoco-cli --json). One local cluster on 127.0.0.1 (tests/openai/harness.py) for all.

    build/.venv/bin/python3 tests/openai/openai_sdk_test.py --source-dir . --bin-dir build
"""

import argparse
import json
import os
import ssl
import sys
import threading
import time
import unittest

import openai

import harness

PROMPT = "In the beginning God created"
DOC = ("And God said, Let there be light: and there was light. And God saw the light, that it was good: "
       "and God divided the light from the darkness.")
UNKNOWN_DOC = "doc-" + "0" * 32  # well formed, never cached
TOL = 1e-4  # logprobs: the same float32 numbers, printed and parsed by two paths

ARGS = None
C = None  # the harness.Cluster


def setUpModule():
    global C
    C = harness.Cluster(ARGS.source_dir, ARGS.bin_dir)


def stop_cluster(failed):
    if C is not None:
        C.stop(failed=failed)  # with the processes' last log lines when a case failed


def client(key="admin", base=None):
    k = C.keys[key] if key in C.keys else key
    return openai.OpenAI(base_url=(base or C.http) + "/v1", api_key=k, max_retries=0, timeout=120)


def model_id():
    return client().models.list().data[0].id


def grpc_generate(*flags, key=None):
    return C.cli_json("generate", *flags, "--json", key=key)


class Completions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = model_id()

    def test_models_lists_the_served_model(self):
        models = client().models.list().data
        self.assertEqual(len(models), 1)
        self.assertEqual(models[0].object, "model")
        self.assertTrue(models[0].id)

    def test_greedy_is_token_identical_to_grpc(self):
        r = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=24, temperature=0, logprobs=1)
        g = grpc_generate("--prompt", PROMPT, "--max-tokens", "24", "--temperature", "0", "--logprobs", "1")
        ch = r.choices[0]
        self.assertEqual(ch.text, g["text"])
        self.assertEqual(r.usage.completion_tokens, len(g["token_ids"]))
        self.assertEqual(ch.logprobs.tokens, [e["text"] for e in g["logprobs"]])
        for got, want in zip(ch.logprobs.token_logprobs, g["logprobs"]):
            self.assertAlmostEqual(got, want["logprob"], delta=TOL)
        self.assertEqual(ch.finish_reason, g["finish_reason"] if g["finish_reason"] != "eos" else "stop")
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.usage.prompt_tokens, g["usage"]["prompt_tokens"])
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        # The ids themselves: the text tokenized by the router is the prompt + the gRPC path's ids.
        tok = C.post("/tokenize", {"prompt": PROMPT + ch.text})
        self.assertEqual(tok[0], 200, tok[1])
        prompt_ids = C.post("/tokenize", {"prompt": PROMPT})[1]["tokens"]
        self.assertEqual(tok[1]["tokens"][:len(prompt_ids)], prompt_ids)

    def test_prompt_as_token_ids_and_a_batch(self):
        ids = C.post("/tokenize", {"prompt": PROMPT})[1]["tokens"]
        g = grpc_generate("--tokens", ",".join(map(str, ids)), "--max-tokens", "12", "--temperature", "0")
        r = client().completions.create(model=self.model, prompt=ids, max_tokens=12, temperature=0)
        self.assertEqual(r.choices[0].text, g["text"])
        batch = client().completions.create(model=self.model, prompt=[PROMPT, "And the earth"], max_tokens=12,
                                            temperature=0)
        self.assertEqual([c.index for c in batch.choices], [0, 1])
        self.assertEqual(batch.choices[0].text, g["text"])
        self.assertEqual(batch.usage.completion_tokens, 24)

    def test_batch_times_n_indexes_and_counts(self):
        r = client().completions.create(model=self.model, prompt=["In the", "And God"], n=2, max_tokens=3,
                                        temperature=0)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2, 3])  # prompt i, choice j: index i * n + j
        self.assertEqual(r.choices[0].text, r.choices[1].text)
        self.assertEqual(r.choices[2].text, r.choices[3].text)
        counts = [C.post("/tokenize", {"prompt": p})[1]["count"] for p in ("In the", "And God")]
        self.assertEqual(r.usage.prompt_tokens, sum(counts))  # each prompt once, whatever n
        self.assertEqual(r.usage.completion_tokens, 12)

    def test_non_ascii_text_round_trips(self):
        text = "Und Gott sprach: Es werde Licht \u2014 na\u00efve caf\u00e9 \u65e5\u672c\u8a9e \U0001F642"
        r = client().completions.create(model=self.model, prompt=text, echo=True, logprobs=1, max_tokens=0)
        self.assertEqual(r.choices[0].text, text)
        full = client().completions.create(model=self.model, prompt=text, max_tokens=30, temperature=0)
        streamed = "".join(c.choices[0].text for c in client().completions.create(
            model=self.model, prompt=text, max_tokens=30, temperature=0, stream=True) if c.choices)
        self.assertEqual(streamed, full.choices[0].text)

    def test_echo_in_a_stream(self):
        full = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=5, temperature=0)
        chunks = list(client().completions.create(model=self.model, prompt=PROMPT, echo=True, max_tokens=5,
                                                  temperature=0, stream=True))
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), PROMPT + full.choices[0].text)

    def test_streaming_equals_non_streaming_and_usage_comes_last(self):
        full = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=20, temperature=0)
        chunks = list(client().completions.create(model=self.model, prompt=PROMPT, max_tokens=20, temperature=0,
                                                  stream=True, stream_options={"include_usage": True}))
        self.assertGreater(len(chunks), 2)
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        self.assertEqual(text, full.choices[0].text)
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, [full.choices[0].finish_reason])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, full.usage.completion_tokens)
        self.assertEqual(chunks[-1].usage.prompt_tokens, full.usage.prompt_tokens)
        self.assertTrue(all(c.usage is None for c in chunks[:-1]))
        self.assertEqual(len({c.id for c in chunks}), 1)

    def test_n_choices(self):
        r = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=10, temperature=1.0, seed=7, n=3)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        self.assertEqual(r.usage.completion_tokens, 30)
        self.assertEqual(r.usage.prompt_tokens, C.post("/tokenize", {"prompt": PROMPT})[1]["count"])
        g = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=10, temperature=0, n=2)
        self.assertEqual(g.choices[0].text, g.choices[1].text)  # greedy: the same twice
        s = list(client().completions.create(model=self.model, prompt=PROMPT, max_tokens=6, temperature=1.0, seed=3,
                                             n=2, stream=True))
        self.assertEqual({c.choices[0].index for c in s if c.choices}, {0, 1})

    def test_seeded_sampling_is_reproducible(self):
        kw = dict(model=self.model, prompt=PROMPT, max_tokens=16, temperature=0.9, top_p=0.95, seed=1234,
                  extra_body={"top_k": 40, "min_p": 0.01, "repetition_penalty": 1.1})
        a = client().completions.create(**kw)
        b = client().completions.create(**kw)
        self.assertEqual(a.choices[0].text, b.choices[0].text)
        self.assertEqual(a.usage.completion_tokens, b.usage.completion_tokens)

    def test_every_sampling_parameter_means_what_grpc_means(self):
        """The same seeded sampled request through both APIs: the same tokens, so each field maps the same."""
        r = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=24, temperature=0.8, top_p=0.9,
                                        seed=42, presence_penalty=0.5, frequency_penalty=0.3,
                                        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.2})
        g = grpc_generate("--prompt", PROMPT, "--max-tokens", "24", "--temperature", "0.8", "--top-p", "0.9", "--seed",
                          "42", "--presence-penalty", "0.5", "--frequency-penalty", "0.3", "--top-k", "20", "--min-p",
                          "0.05", "--repetition-penalty", "1.2")
        self.assertEqual(r.choices[0].text, g["text"])
        self.assertEqual(r.usage.completion_tokens, len(g["token_ids"]))

    def test_tokenize_and_detokenize_match_grpc(self):
        text = "And God called the light Day, and the darkness he called Night."
        status, tok, _ = C.post("/tokenize", {"prompt": text})
        self.assertEqual(status, 200, tok)
        self.assertEqual(tok["tokens"], C.cli_json("tokenize", "--text", text, "--json")["tokens"])
        self.assertEqual(tok["count"], len(tok["tokens"]))
        status, detok, _ = C.post("/detokenize", {"tokens": tok["tokens"]})
        self.assertEqual(status, 200, detok)
        self.assertEqual(detok["prompt"], text)

    def test_streamed_logprobs(self):
        full = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2)
        chunks = list(client().completions.create(model=self.model, prompt=PROMPT, max_tokens=8, temperature=0,
                                                  logprobs=2, stream=True))
        tokens, lps = [], []
        for c in chunks:
            if c.choices and c.choices[0].logprobs:
                tokens += c.choices[0].logprobs.tokens
                lps += c.choices[0].logprobs.token_logprobs
        self.assertEqual(tokens, full.choices[0].logprobs.tokens)
        for a, b in zip(lps, full.choices[0].logprobs.token_logprobs):
            self.assertAlmostEqual(a, b, delta=TOL)

    def test_top_logprobs(self):
        r = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=3)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 5)
        self.assertEqual(len(lp.top_logprobs), 5)
        for tok, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertEqual(len(top), 3)
            self.assertIn(tok, top)  # greedy: the chosen token is the most likely one
            self.assertAlmostEqual(max(top.values()), chosen, delta=TOL)
            self.assertLessEqual(chosen, 0.0)
        self.assertEqual(lp.text_offset[0], 0)

    def test_echo_scoring_equals_grpc_score(self):
        r = client().completions.create(model=self.model, prompt=DOC, echo=True, logprobs=1, max_tokens=0)
        s = C.cli_json("score", "--text", DOC, "--json")
        ch = r.choices[0]
        self.assertEqual(ch.text, DOC)
        lp = ch.logprobs
        self.assertEqual(len(lp.tokens), len(s["token_ids"]))
        self.assertIsNone(lp.token_logprobs[0])  # the first token has no context to be scored in
        self.assertEqual(len(lp.token_logprobs) - 1, len(s["token_logprobs"]))
        for got, want in zip(lp.token_logprobs[1:], s["token_logprobs"]):
            self.assertAlmostEqual(got, want, delta=TOL)
        self.assertAlmostEqual(sum(lp.token_logprobs[1:]), s["sum_logprob"], delta=TOL * len(lp.tokens))
        self.assertEqual("".join(lp.tokens), DOC)
        self.assertEqual(r.usage.completion_tokens, 0)
        self.assertEqual(r.usage.prompt_tokens, len(s["token_ids"]))

    def test_echo_with_generation_prefixes_the_prompt(self):
        r = client().completions.create(model=self.model, prompt=PROMPT, echo=True, max_tokens=8, temperature=0)
        g = grpc_generate("--prompt", PROMPT, "--max-tokens", "8", "--temperature", "0")
        self.assertEqual(r.choices[0].text, PROMPT + g["text"])

    def test_stop_string(self):
        full = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=40, temperature=0).choices[0]
        words = full.text.split()
        self.assertGreater(len(words), 4, full.text)
        stop = " " + words[3]
        cut = full.text.index(stop)
        r = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=40, temperature=0,
                                        stop=[stop, "\x00never"])
        self.assertEqual(r.choices[0].text, full.text[:cut])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        # The same through the stream.
        chunks = list(client().completions.create(model=self.model, prompt=PROMPT, max_tokens=40, temperature=0,
                                                  stop=stop, stream=True))
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), full.text[:cut])

    def test_ignore_eos_and_priority_extension_fields(self):
        r = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=30, temperature=0,
                                        extra_body={"ignore_eos": True, "priority": 5})
        g = grpc_generate("--prompt", PROMPT, "--max-tokens", "30", "--temperature", "0", "--ignore-eos",
                          "--priority", "5")
        self.assertEqual(r.usage.completion_tokens, 30)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.choices[0].text, g["text"])

    def test_a_repeated_prompt_reports_cached_tokens(self):
        prompt = "The second time: " + DOC + " And the evening and the morning were the first day." * 3  # unique
        first = client().completions.create(model=self.model, prompt=prompt, max_tokens=2, temperature=0)
        self.assertEqual(first.usage.prompt_tokens_details.cached_tokens, 0)
        for _ in range(100):  # the prefill worker stores the prefix after answering: poll briefly
            again = client().completions.create(model=self.model, prompt=prompt, max_tokens=2, temperature=0)
            if again.usage.prompt_tokens_details.cached_tokens > 0:
                break
            time.sleep(0.1)
        self.assertGreater(again.usage.prompt_tokens_details.cached_tokens, 0)
        self.assertLess(again.usage.prompt_tokens_details.cached_tokens, again.usage.prompt_tokens)
        self.assertEqual(again.choices[0].text, first.choices[0].text)

    def test_document_ids_reuse_a_cached_document(self):
        doc = C.cli_json("cache-doc", "--text", DOC)
        q = " And the evening and the morning"
        r = client().completions.create(model=self.model, prompt=q, max_tokens=12, temperature=0,
                                        extra_body={"document_ids": [doc["id"]]})
        g = grpc_generate("--prompt", q, "--max-tokens", "12", "--temperature", "0", "--document-ids", doc["id"])
        self.assertEqual(r.choices[0].text, g["text"])
        self.assertEqual(r.usage.prompt_tokens, g["usage"]["prompt_tokens"])
        self.assertGreaterEqual(r.usage.prompt_tokens_details.cached_tokens, doc["token_count"] - 1)
        self.assertEqual(r.usage.prompt_tokens_details.cached_tokens, g["usage"]["cached_tokens"])
        # The same text as a plain prompt: the document's text + the question.
        plain = client().completions.create(model=self.model, prompt=DOC + q, max_tokens=12, temperature=0)
        self.assertEqual(plain.choices[0].text, r.choices[0].text)


class Chat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = model_id()

    MESSAGES = [{"role": "system", "content": "Thou art a scribe."},
                {"role": "user", "content": "Who created the heaven and the earth?"}]

    @staticmethod
    def rendered(messages):
        """tests/data/chat_templates/chatml.jinja by hand, with the generation prompt."""
        return "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in messages) + \
            "<|im_start|>assistant\n"

    def test_chat_is_the_completion_of_the_rendered_template(self):
        r = client().chat.completions.create(model=self.model, messages=self.MESSAGES, max_tokens=16, temperature=0)
        p = client().completions.create(model=self.model, prompt=self.rendered(self.MESSAGES), max_tokens=16,
                                        temperature=0)
        self.assertEqual(r.object, "chat.completion")
        msg = r.choices[0].message
        self.assertEqual(msg.role, "assistant")
        self.assertEqual(msg.content, p.choices[0].text)
        self.assertEqual(r.usage.prompt_tokens, p.usage.prompt_tokens)
        self.assertEqual(r.usage.completion_tokens, 16)
        self.assertEqual(r.choices[0].finish_reason, p.choices[0].finish_reason)

    def test_chat_streaming_deltas(self):
        full = client().chat.completions.create(model=self.model, messages=self.MESSAGES, max_tokens=16,
                                                temperature=0)
        chunks = list(client().chat.completions.create(model=self.model, messages=self.MESSAGES, max_tokens=16,
                                                       temperature=0, stream=True,
                                                       stream_options={"include_usage": True}))
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))
        with_choices = [c for c in chunks if c.choices]
        self.assertEqual(with_choices[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in with_choices),
                         full.choices[0].message.content)
        self.assertEqual(with_choices[-1].choices[0].finish_reason, full.choices[0].finish_reason)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, full.usage.completion_tokens)

    def test_chat_max_completion_tokens_stop_and_seed(self):
        full = client().chat.completions.create(model=self.model, messages=self.MESSAGES, max_completion_tokens=24,
                                                temperature=0)
        self.assertEqual(full.usage.completion_tokens, 24)
        words = full.choices[0].message.content.split()
        self.assertGreater(len(words), 3, full.choices[0].message.content)
        stop = " " + words[2]
        r = client().chat.completions.create(model=self.model, messages=self.MESSAGES, max_completion_tokens=24,
                                             temperature=0, stop=stop)
        content = full.choices[0].message.content
        self.assertEqual(r.choices[0].message.content, content[:content.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        a, b = (client().chat.completions.create(model=self.model, messages=self.MESSAGES, max_tokens=12,
                                                 temperature=1.0, seed=99) for _ in range(2))
        self.assertEqual(a.choices[0].message.content, b.choices[0].message.content)

    def test_chat_n_and_logprobs(self):
        r = client().chat.completions.create(model=self.model, messages=self.MESSAGES, max_tokens=6, temperature=0,
                                             n=2, logprobs=True, top_logprobs=2)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1])
        self.assertEqual(r.choices[0].message.content, r.choices[1].message.content)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), 6)
        for e in content:
            self.assertEqual(len(e.top_logprobs), 2)
            self.assertAlmostEqual(e.top_logprobs[0].logprob, e.logprob, delta=TOL)
        self.assertEqual("".join(e.token for e in content), r.choices[0].message.content)

    def test_chat_without_a_template_is_a_400_naming_it(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            client(key="none", base=C.bare_http).chat.completions.create(model=self.model, messages=self.MESSAGES,
                                                                         max_tokens=4)
        self.assertIn("chat template", str(cm.exception.message).replace("_", " ").lower())
        # Completions still work there.
        r = client(key="none", base=C.bare_http).completions.create(model=self.model, prompt=PROMPT, max_tokens=4,
                                                                    temperature=0)
        self.assertEqual(r.usage.completion_tokens, 4)


class Errors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = model_id()

    def bad_request(self, param, **kw):
        with self.assertRaises(openai.BadRequestError) as cm:
            client().completions.create(model=self.model, **kw)
        e = cm.exception
        self.assertEqual(e.status_code, 400)
        self.assertEqual(e.param, param, e.body)
        self.assertIn(param, e.message)
        self.assertEqual(e.type, "invalid_request_error", e.body)
        return e

    def test_bad_parameters_name_the_parameter(self):
        self.bad_request("temperature", prompt=PROMPT, max_tokens=4, temperature=-1)
        self.bad_request("top_p", prompt=PROMPT, max_tokens=4, top_p=1.5)
        self.bad_request("n", prompt=PROMPT, max_tokens=4, n=0)
        self.bad_request("max_tokens", prompt=PROMPT, max_tokens=-3)
        self.bad_request("logprobs", prompt=PROMPT, max_tokens=4, logprobs=100000)
        self.bad_request("prompt", prompt=[[1, 2], [10 ** 9]], max_tokens=4)
        self.bad_request("prompt", prompt=[1] * 5000, max_tokens=4)  # past the model's max_seq_len
        self.bad_request("max_tokens", prompt=PROMPT, max_tokens=100000)
        self.bad_request("logit_bias", prompt=PROMPT, max_tokens=4, logit_bias={"5": 100})  # refused, not ignored

    def test_bad_extension_field_types(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            client().completions.create(model=self.model, prompt=PROMPT, max_tokens=4, extra_body={"priority": "high"})
        self.assertIn("priority", cm.exception.message)

    def test_chat_bad_messages(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            client().chat.completions.create(model=self.model, messages=[], max_tokens=4)
        self.assertIn("messages", cm.exception.message)

    def test_missing_or_unknown_key_is_an_authentication_error(self):
        with self.assertRaises(openai.AuthenticationError) as cm:
            client("yoco-not-a-key").completions.create(model=self.model, prompt=PROMPT, max_tokens=2)
        self.assertEqual(cm.exception.status_code, 401)
        self.assertNotIn("yoco-not-a-key", cm.exception.message)  # never echoes the key
        # No Authorization header at all (the SDK always sends one): 401 in the same shape.
        status, body, _ = C.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2}, key="")
        self.assertEqual(status, 401, body)
        self.assertEqual(body["error"]["type"], cm.exception.type)

    def test_a_key_without_the_scope_is_permission_denied(self):
        with self.assertRaises(openai.PermissionDeniedError) as cm:
            client("scorer").completions.create(model=self.model, prompt=PROMPT, max_tokens=2)
        self.assertIn("scorer", cm.exception.message)
        self.assertIn("generate", cm.exception.message)

    def test_an_unknown_document_is_not_found(self):
        with self.assertRaises(openai.NotFoundError) as cm:
            client().completions.create(model=self.model, prompt=PROMPT, max_tokens=2,
                                        extra_body={"document_ids": [UNKNOWN_DOC]})
        self.assertIn(UNKNOWN_DOC, cm.exception.message)
        # A malformed id is the caller's mistake: 400 naming the field.
        with self.assertRaises(openai.BadRequestError) as cm:
            client().completions.create(model=self.model, prompt=PROMPT, max_tokens=2,
                                        extra_body={"document_ids": ["doc-nonsense"]})
        self.assertEqual(cm.exception.param, "document_ids")

    def test_an_unknown_model_is_not_found(self):
        with self.assertRaises(openai.NotFoundError) as cm:
            client().completions.create(model="gpt-nothing", prompt=PROMPT, max_tokens=2)
        self.assertIn("gpt-nothing", cm.exception.message)
        self.assertEqual(cm.exception.code, "model_not_found")

    def test_over_the_keys_context_is_a_rate_limit_error(self):
        with self.assertRaises(openai.RateLimitError) as cm:
            client("small").completions.create(model=self.model, prompt=PROMPT, max_tokens=64)
        self.assertIn("max_context", cm.exception.message)
        ok = client("small").completions.create(model=self.model, prompt=PROMPT, max_tokens=4, temperature=0)
        self.assertEqual(ok.usage.completion_tokens, 4)

    def test_admission_refusal_is_a_rate_limit_error_with_retry_after(self):
        """The second router admits one request at a time (--max-in-flight 1)."""
        bare = client(key="none", base=C.bare_http)
        stream = bare.completions.create(model=self.model, prompt=PROMPT, max_tokens=3000, temperature=0, stream=True,
                                         extra_body={"ignore_eos": True})
        try:
            next(iter(stream))  # admitted and generating
            with self.assertRaises(openai.RateLimitError) as cm:
                bare.completions.create(model=self.model, prompt=PROMPT, max_tokens=2)
            self.assertIn("admission", cm.exception.message)
            self.assertGreaterEqual(int(cm.exception.response.headers["retry-after"]), 1)
        finally:
            stream.close()  # the client goes away: the router cancels the request and admits again
        for _ in range(200):
            try:
                r = bare.completions.create(model=self.model, prompt=PROMPT, max_tokens=2, temperature=0)
                break
            except openai.RateLimitError:
                time.sleep(0.1)
        else:
            self.fail("a closed stream's request still holds the router's only admission slot after 20 s")
        self.assertEqual(r.usage.completion_tokens, 2)

    def test_error_body_has_the_openai_shape(self):
        status, body, _ = C.post("/v1/completions", {"model": self.model, "prompt": PROMPT, "max_tokens": 2,
                                                     "temperature": "hot"})
        self.assertEqual(status, 400)
        self.assertEqual(set(body), {"error"})
        self.assertTrue({"message", "type", "param", "code"} <= set(body["error"]), body)
        self.assertEqual(body["error"]["param"], "temperature")

    def test_concurrent_requests_through_one_client(self):
        c = client()
        out, errs = [None] * 4, []

        def one(i):
            try:
                out[i] = c.completions.create(model=self.model, prompt=PROMPT, max_tokens=8, temperature=0)
            except Exception as e:  # noqa: BLE001  (reported below)
                errs.append(e)

        th = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        self.assertEqual(errs, [])
        self.assertEqual(len({o.choices[0].text for o in out}), 1)


SCHEMA = {"type": "object", "properties": {
    "book": {"type": "string", "maxLength": 12},
    "chapter": {"type": "integer", "minimum": 1, "maximum": 150},
    "holy": {"type": "boolean"},
    "tribe": {"enum": ["Judah", "Levi", "Dan"]}},
    "required": ["book", "chapter", "holy", "tribe"], "additionalProperties": False}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "verse", "schema": SCHEMA}}


class StructuredOutputs(unittest.TestCase):
    """response_format and structured_outputs (docs/design.md §3.2c): greedy output always parses as
    its constraint, on both endpoints, streamed and not, and equals the gRPC Generate's; a bad
    constraint is a 400 naming its field, and the cluster serves on afterwards."""

    @classmethod
    def setUpClass(cls):
        cls.model = model_id()

    def check_schema(self, text):
        doc = json.loads(text)
        self.assertEqual(list(doc), ["book", "chapter", "holy", "tribe"], text)  # the schema's order
        self.assertIsInstance(doc["book"], str)
        self.assertLessEqual(len(doc["book"]), 12)
        self.assertIsInstance(doc["chapter"], int)
        self.assertTrue(1 <= doc["chapter"] <= 150, text)
        self.assertIsInstance(doc["holy"], bool)
        self.assertIn(doc["tribe"], ("Judah", "Levi", "Dan"))

    def test_json_schema_on_completions_equals_grpc(self):
        r = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=96, temperature=0,
                                        extra_body={"response_format": RESPONSE_FORMAT})
        self.check_schema(r.choices[0].text)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        g = grpc_generate("--prompt", PROMPT, "--max-tokens", "96", "--temperature", "0", "--json-schema",
                          json.dumps(SCHEMA))
        self.assertEqual(g["text"], r.choices[0].text)
        self.assertEqual(g["finish_reason"], "eos")

    def test_json_schema_and_json_object_on_chat_streamed_and_not(self):
        msgs = [{"role": "user", "content": "Name a book of the law."}]
        full = client().chat.completions.create(model=self.model, messages=msgs, max_tokens=96, temperature=0,
                                                response_format=RESPONSE_FORMAT)
        self.check_schema(full.choices[0].message.content)
        self.assertEqual(full.choices[0].finish_reason, "stop")
        chunks = list(client().chat.completions.create(model=self.model, messages=msgs, max_tokens=96,
                                                       temperature=0, response_format=RESPONSE_FORMAT, stream=True))
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                         full.choices[0].message.content)
        obj = client().chat.completions.create(model=self.model, messages=msgs, max_tokens=48, temperature=0,
                                               response_format={"type": "json_object"})
        content = obj.choices[0].message.content
        self.assertTrue(content.startswith("{"), content)
        if obj.choices[0].finish_reason == "stop":  # complete: it parses (else max_tokens cut it)
            self.assertIsInstance(json.loads(content), dict)

    def test_structured_outputs_regex_choice_and_grammar(self):
        def complete(so, **kw):
            return client().completions.create(model=self.model, prompt=PROMPT, max_tokens=32, temperature=0,
                                               extra_body={"structured_outputs": so}, **kw).choices[0]
        c = complete({"regex": "(light|darkness|water)-[0-9]{2}"})
        self.assertRegex(c.text, r"^(light|darkness|water)-[0-9]{2}$")
        self.assertEqual(c.finish_reason, "stop")
        self.assertIn(complete({"choice": ["Genesis", "Exodus", "Leviticus"]}).text, ("Genesis", "Exodus", "Leviticus"))
        g = complete({"grammar": 'root ::= word " and " word\nword ::= "heaven" | "earth" | "sea"'})
        self.assertRegex(g.text, r"^(heaven|earth|sea) and (heaven|earth|sea)$")
        streamed = "".join(x.choices[0].text for x in client().completions.create(
            model=self.model, prompt=PROMPT, max_tokens=32, temperature=0, stream=True,
            extra_body={"structured_outputs": {"choice": ["Genesis", "Exodus", "Leviticus"]}}) if x.choices)
        self.assertIn(streamed, ("Genesis", "Exodus", "Leviticus"))
        grpc_choice = grpc_generate("--prompt", PROMPT, "--max-tokens", "32", "--temperature", "0", "--choice",
                                    "Genesis", "--choice", "Exodus", "--choice", "Leviticus")
        self.assertEqual(grpc_choice["text"], streamed)

    def bad(self, param, chat=False, **extra):
        with self.assertRaises(openai.BadRequestError) as cm:
            if chat:
                client().chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}],
                                                 max_tokens=8, extra_body=extra)
            else:
                client().completions.create(model=self.model, prompt=PROMPT, max_tokens=8, extra_body=extra)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(cm.exception.param, param, cm.exception.body)
        self.assertIn(param, cm.exception.message)

    def test_bad_constraints_are_400s_naming_the_field_and_everything_stays_up(self):
        self.bad("response_format.json_schema.schema",
                 response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}})
        self.bad("response_format.json_schema.schema", chat=True,
                 response_format={"type": "json_schema", "json_schema": {"name": "x"}})
        self.bad("response_format.type", response_format={"type": "yaml"})
        self.bad("structured_outputs.regex", structured_outputs={"regex": "(unclosed"})
        self.bad("structured_outputs.grammar", structured_outputs={"grammar": "root ::= missing_rule"})
        self.bad("structured_outputs.choice", structured_outputs={"choice": []})
        self.bad("structured_outputs.json", structured_outputs={"json": "{not json"})
        self.bad("structured_outputs.regex", response_format={"type": "json_object"},
                 structured_outputs={"regex": "a+"})  # two constraints
        huge = {"type": "object", "properties": {"p%d" % i: {"type": "string", "pattern": "[a-z]{1,%d}" % (i + 2)}
                                                 for i in range(4000)}}
        self.bad("structured_outputs.json", structured_outputs={"json": huge})  # past the size bound
        with self.assertRaises(RuntimeError) as cm:  # the gRPC API: INVALID_ARGUMENT naming the field
            grpc_generate("--prompt", PROMPT, "--max-tokens", "4", "--regex", "(unclosed")
        self.assertIn("INVALID_ARGUMENT", str(cm.exception))
        self.assertIn("structured_output.regex", str(cm.exception))
        r = client().completions.create(model=self.model, prompt=PROMPT, max_tokens=4, temperature=0)
        self.assertEqual(r.usage.completion_tokens, 4)
        self.assertIsNone(C.launcher.poll(), "the cluster launcher exited")


TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "chat_templates")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city of the Bible",
    "parameters": {"type": "object", "properties": {
        "city": {"enum": ["Jerusalem", "Babylon", "Nineveh"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}}}
PSALM = {"type": "function", "function": {
    "name": "find_psalm",
    "parameters": {"type": "object", "properties": {
        "number": {"type": "integer", "minimum": 1, "maximum": 150},
        "holy": {"type": "boolean"}},
        "required": ["number", "holy"], "additionalProperties": False}}}
TOOLS = [WEATHER, PSALM]
ASK = [{"role": "user", "content": "What weather is in Nineveh?"}]
# Each family's syntax for one call (router/tool_calls.h), and a router whose template writes it;
# "hermes-flag" names the syntax with --tool-call-parser over a template that writes none.
CALL_TEXT = {
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Nineveh", "days": 3}}\n</tool_call>',
    "llama3_json": '{"name": "get_weather", "parameters": {"city": "Nineveh", "days": 3}}',
    "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Nineveh", "days": 3}}]',
    "mistral_args": '[TOOL_CALLS]get_weather[ARGS]{"city": "Nineveh", "days": 3}',
}
FAMILIES = {"hermes": ("qwen2.jinja", []), "llama3_json": ("llama3.jinja", []), "mistral": ("mistral.jinja", []),
            "hermes-flag": ("chatml.jinja", ["--tool-call-parser=hermes"]),
            "mistral_args": ("mistral.jinja", ["--tool-call-parser=mistral_args"])}


class ToolCalls(unittest.TestCase):
    """Tool calls on chat (docs/design.md §3.2d), one router per template family on the cluster's
    workers: "required" and a named function enforced (the reply IS a call, its arguments valid for
    the schema), "auto" parsed from whatever the reply is (here a reply forced into each family's
    syntax by a choice constraint), "none" not parsed; streamed and not; a call's round trip through
    the template; bad definitions answered 400 naming the field with every process alive."""

    @classmethod
    def setUpClass(cls):
        cls.base = {name: C.start_router("tools-" + name, "--chat-template=" + os.path.join(TEMPLATES, t), *flags)
                    for name, (t, flags) in FAMILIES.items()}
        cls.model = model_id()

    def sdk(self, family):
        return client(key="none", base=self.base[family])

    def check_call(self, family, call):
        self.assertEqual(call.type, "function")
        if family.startswith("mistral"):  # its templates take 9 alphanumerics
            self.assertRegex(call.id, r"^[A-Za-z0-9]{9}$")
        else:
            self.assertRegex(call.id, r"^call_[A-Za-z0-9]{24}$")
        args = json.loads(call.function.arguments)
        if call.function.name == "get_weather":
            self.assertEqual(list(args), ["city", "days"], args)  # the schema's order
            self.assertIn(args["city"], ("Jerusalem", "Babylon", "Nineveh"))
            self.assertTrue(isinstance(args["days"], int) and 1 <= args["days"] <= 7, args)
        else:
            self.assertEqual(call.function.name, "find_psalm")
            self.assertEqual(list(args), ["number", "holy"], args)
            self.assertTrue(isinstance(args["number"], int) and 1 <= args["number"] <= 150, args)
            self.assertIsInstance(args["holy"], bool)
        return args

    @staticmethod
    def assemble(chunks):
        """A streamed chat reply: (content, [(id, name, arguments, argument fragments)], finish_reason)."""
        content, calls, finish = "", {}, None
        for c in chunks:
            if not c.choices:
                continue
            d = c.choices[0].delta
            content += d.content or ""
            for t in d.tool_calls or []:
                if t.index not in calls:  # its first delta: id, type and name
                    assert t.id and t.type == "function" and t.function.name, t
                    calls[t.index] = [t.id, t.function.name, "", 0]
                else:
                    assert t.id is None and t.function.name is None, t
                calls[t.index][2] += t.function.arguments or ""
                calls[t.index][3] += bool(t.function.arguments)
            finish = c.choices[0].finish_reason or finish
        return content, [tuple(calls[i]) for i in sorted(calls)], finish

    def create(self, family, stream=False, **kw):
        args = dict(model=self.model, messages=ASK, tools=TOOLS, max_tokens=96, temperature=0)
        args.update(kw)
        r = self.sdk(family).chat.completions.create(stream=stream, **args)
        return self.assemble(list(r)) if stream else r

    def test_required_is_one_valid_call_in_every_family(self):
        for family in FAMILIES:
            with self.subTest(family=family):
                r = self.create(family, tool_choice="required")
                choice = r.choices[0]
                self.assertEqual(choice.finish_reason, "tool_calls", choice)
                self.assertIsNone(choice.message.content)
                self.assertEqual(len(choice.message.tool_calls), 1)
                self.check_call(family, choice.message.tool_calls[0])

    def test_a_named_function_streamed_equals_not_streamed(self):
        named = {"type": "function", "function": {"name": "find_psalm"}}
        for family in FAMILIES:
            with self.subTest(family=family):
                whole = self.create(family, tool_choice=named).choices[0]
                self.assertEqual(whole.finish_reason, "tool_calls")
                self.assertEqual([c.function.name for c in whole.message.tool_calls], ["find_psalm"])
                self.check_call(family, whole.message.tool_calls[0])
                content, calls, finish = self.create(family, stream=True, tool_choice=named)
                self.assertEqual(content, "")
                self.assertEqual(finish, "tool_calls")
                self.assertEqual(len(calls), 1)
                _, name, arguments, fragments = calls[0]
                self.assertEqual(name, "find_psalm")
                self.assertEqual(arguments, whole.message.tool_calls[0].function.arguments)
                self.assertGreater(fragments, 1, "the arguments came in one piece, not as they were generated")

    def test_auto_parses_whatever_the_reply_is(self):
        for family, text in CALL_TEXT.items():
            with self.subTest(family=family):
                prefix = "" if family == "llama3_json" else "Let me see. "  # Llama's calls are the whole reply
                forced = {"structured_outputs": {"choice": [prefix + text]}}
                whole = self.create(family, extra_body=forced).choices[0]  # tool_choice: "auto" by default
                self.assertEqual(whole.finish_reason, "tool_calls")
                self.assertEqual(whole.message.content, prefix or None)
                self.assertEqual(len(whole.message.tool_calls), 1)
                self.assertEqual(self.check_call(family, whole.message.tool_calls[0]), {"city": "Nineveh", "days": 3})
                content, calls, finish = self.create(family, stream=True, tool_choice="auto", extra_body=forced)
                self.assertEqual((content, finish), (prefix, "tool_calls"))
                self.assertEqual([(c[1], c[2]) for c in calls], [("get_weather", '{"city": "Nineveh", "days": 3}')])
        # A reply with no call is content, equal to what tool_choice "none" gives for the same prompt.
        free = self.create("hermes", max_tokens=12).choices[0]
        none = self.create("hermes", max_tokens=12, tool_choice="none").choices[0]
        if not free.message.tool_calls:
            self.assertEqual(free.message.content, none.message.content)
            self.assertIn(free.finish_reason, ("stop", "length"))
        content, calls, _ = self.create("hermes", stream=True, max_tokens=12)
        self.assertEqual((content, bool(calls)), (free.message.content or "", bool(free.message.tool_calls)))

    def test_none_is_not_parsed(self):
        forced = {"structured_outputs": {"choice": [CALL_TEXT["hermes"]]}}
        r = self.create("hermes", tool_choice="none", extra_body=forced).choices[0]
        self.assertEqual(r.message.content, CALL_TEXT["hermes"])
        self.assertFalse(r.message.tool_calls)
        self.assertEqual(r.finish_reason, "stop")

    def rendered(self, family, messages):
        """The prompt the router renders for `messages` (vLLM's /tokenize with messages), as text."""
        status, tok, _ = C.post("/tokenize", {"messages": messages, "tools": TOOLS}, key="", base=self.base[family])
        self.assertEqual(status, 200, tok)
        status, text, _ = C.post("/detokenize", {"tokens": tok["tokens"]}, key="", base=self.base[family])
        self.assertEqual(status, 200, text)
        return text["prompt"]

    def test_a_call_round_trips(self):
        """assistant tool_calls -> a tool message -> an answer: the template renders the call as the
        family writes it and the result, and the model answers in text."""
        shown = {"hermes": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s", "days": %d}}\n'
                            '</tool_call>', "<tool_response>\n{\"forecast\": \"hail\"}\n</tool_response>"),
                 "llama3_json": ('{"name": "get_weather", "parameters": {"city": "%s", "days": %d}}',
                                 "<|start_header_id|>ipython<|end_header_id|>"),
                 "mistral": ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "%s", "days": %d}, "id": ',
                             '[TOOL_RESULTS]{"content": {"forecast": "hail"}, "call_id": ')}
        for family in shown:
            with self.subTest(family=family):
                first = self.create(family, tool_choice={"type": "function", "function": {"name": "get_weather"}})
                call = first.choices[0].message.tool_calls[0]
                args = json.loads(call.function.arguments)
                messages = ASK + [
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                    {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "hail"}'}]
                prompt = self.rendered(family, messages)
                self.assertIn(shown[family][0] % (args["city"], args["days"]), prompt)
                self.assertIn(shown[family][1], prompt)
                answer = self.sdk(family).chat.completions.create(model=self.model, messages=messages, tools=TOOLS,
                                                                  tool_choice="none", max_tokens=8, temperature=0)
                self.assertEqual(answer.usage.completion_tokens, 8)
                self.assertTrue(answer.choices[0].message.content)
                self.assertFalse(answer.choices[0].message.tool_calls)

    def bad(self, param, base=None, **kw):
        with self.assertRaises(openai.BadRequestError) as cm:
            client(key="none", base=base or self.base["hermes"]).chat.completions.create(
                model=self.model, messages=ASK, max_tokens=8, **kw)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(cm.exception.param, param, cm.exception.body)
        self.assertIn(param, cm.exception.message)

    def test_bad_tool_definitions_are_400s_naming_the_field_and_everything_stays_up(self):
        unnamed = {"type": "function", "function": {"name": "has a space"}}
        self.bad("tools[0].function.name", tools=[unnamed])
        nonsense = {"type": "function", "function": {"name": "p", "parameters": {"type": "nonsense"}}}
        self.bad("tools[1].function.parameters", tools=[WEATHER, nonsense])
        self.bad("tools[0].type", tools=[{"type": "retrieval", "function": WEATHER["function"]}])
        self.bad("tool_choice.function.name", tools=TOOLS,
                 tool_choice={"type": "function", "function": {"name": "smite"}})
        self.bad("tool_choice", tools=TOOLS, tool_choice="required", response_format={"type": "json_object"})
        self.bad("tool_choice", tool_choice="required")  # no tools
        # A router whose template writes no tool-call syntax serves tool_choice "none" only.
        with self.assertRaises(openai.BadRequestError) as cm:
            client().chat.completions.create(model=self.model, messages=ASK, tools=TOOLS, max_tokens=4)
        self.assertEqual(cm.exception.param, "tool_choice")
        r = client().chat.completions.create(model=self.model, messages=ASK, tools=TOOLS, tool_choice="none",
                                             max_tokens=4, temperature=0)
        self.assertEqual(r.usage.completion_tokens, 4)
        self.assertIsNone(C.launcher.poll(), "the cluster launcher exited")
        for p in C.routers:
            self.assertIsNone(p.poll(), "a router exited")
        self.assertEqual(self.create("hermes", tool_choice="required").choices[0].finish_reason, "tool_calls")


class Secure(unittest.TestCase):
    """A --secure cluster (deploy/local/cluster.py): the SDK over HTTPS, checking the router's certificate."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = harness.Cluster(ARGS.source_dir, ARGS.bin_dir, secure=True)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def sdk(self, key, cafile=None):
        verify = ssl.create_default_context(cafile=cafile) if cafile else True  # True: the system's CAs
        return openai.OpenAI(base_url=self.cluster.http + "/v1", api_key=key, max_retries=0, timeout=120,
                             http_client=openai.DefaultHttpxClient(verify=verify))

    def test_https_with_the_ca_and_a_key(self):
        c = self.sdk(self.cluster.keys["tenant"], self.cluster.ca)
        r = c.completions.create(model=c.models.list().data[0].id, prompt=PROMPT, max_tokens=6, temperature=0)
        self.assertEqual(r.usage.completion_tokens, 6)
        with self.assertRaises(openai.AuthenticationError):
            self.sdk("yoco-wrong", self.cluster.ca).completions.create(prompt=PROMPT, max_tokens=2, model="")

    def test_an_unknown_ca_is_refused_by_the_client(self):
        with self.assertRaises(openai.APIConnectionError):
            self.sdk(self.cluster.keys["tenant"]).models.list()  # the system's CAs never signed it


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--source-dir", required=True)
    p.add_argument("--bin-dir", required=True)
    ARGS, rest = p.parse_known_args()
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    stop_cluster(failed=not prog.result.wasSuccessful())
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
