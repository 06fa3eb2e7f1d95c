#!/usr/bin/env python3
"""Renders real chat templates (tests/data/chat_templates/*.jinja) and small feature templates with
Python's jinja2 exactly as Hugging Face transformers does (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now, its tojson), and with our
C++ (render_cases), on many message lists; compares the outputs byte for byte. A case jinja2
refuses must be refused by ours too, with the same message when the template raised it.

  compare_jinja2.py --render-cases BUILD/render_cases --python VENV/bin/python3

Our Json keeps object keys sorted, so the cases are given to jinja2 with sorted keys as well;
the "ordered" variant of each case also passes the request's JSON text (ChatTemplateContext::
request_json), and jinja2 gets the objects in the client's order.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "data", "chat_templates")

# Runs under the venv's Python (jinja2 pinned in scripts/setup.sh): renders every case as HF does.
JINJA2_RENDERER = r'''
import json, sys
from datetime import datetime
import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.exceptions import TemplateError

class Raised(TemplateError):
    pass

def raise_exception(message):
    raise Raised(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def strftime_now(format):
    return datetime.now().strftime(format)

class AssistantTracker(Extension):  # HF's {% generation %}: renders its body unchanged here
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)
    def _render(self, caller):
        return caller()

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now

cases = json.load(open(sys.argv[1], encoding="utf-8"), object_pairs_hook=lambda kv: dict(sorted(kv)))
out = []
compiled = {}
for c in cases:
    try:
        src = c["source"] if "source" in c else open(sys.argv[2] + "/" + c["template"], encoding="utf-8").read()
        if src not in compiled:
            compiled[src] = env.from_string(src)
        t = compiled[src]
        messages, extra = c["messages"], c.get("extra") or {}
        if "request_json" in c:  # the client's key order, as transformers would get it
            request = json.loads(c["request_json"])
            messages, extra = request["messages"], {k: request[k] for k in extra}
        kwargs = {"messages": messages, "tools": None, "documents": None,
                  "add_generation_prompt": c.get("add_generation_prompt", True),
                  "bos_token": c.get("bos_token", ""), "eos_token": c.get("eos_token", "")}
        kwargs.update(extra)
        out.append({"ok": True, "text": t.render(**kwargs)})
    except Raised as e:
        out.append({"ok": False, "raised": True, "error": str(e)})
    except Exception as e:
        out.append({"ok": False, "raised": False, "error": type(e).__name__ + ": " + str(e)})
json.dump(out, sys.stdout, ensure_ascii=False)
'''

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                                                              "description": "Unit"}},
                   "required": ["city"]}}},
         {"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                           "parameters": {"type": "object", "properties": {
                                               "a": {"type": "number", "description": "first"},
                                               "b": {"type": "number", "description": "second"}},
                                               "required": ["a", "b"]}}},
         {"type": "function", "function": {
             "name": "search", "description": "Search the web",
             "parameters": {"type": "object", "required": ["queries"], "properties": {
                 "queries": {"type": "array", "items": {"type": "string"}, "description": "Queries"},
                 "limit": {"type": ["integer", "string"], "description": "Max results"},
                 "filters": {"type": "object", "additionalProperties": {"type": "boolean"},
                             "description": "Filters"}}}}}]

TRICKY = 'He said "hi" and \'bye\'\nnew line\\backslash\ttab {{ not a tag }} {% raw %} </s> <|im_end|>'
UNICODE = "héllo wörld — 你好，世界 🙂👍🏽 مرحبا ñ\u00a0nbsp\u2028sep"


def m(role, content, **kw):
    d = {"role": role, "content": content}
    d.update(kw)
    return d


def tool_call(name, args, id_="call12345", as_string=False):
    return {"id": id_, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args) if as_string else args}}


def conversations():
    long_chat = []
    for i in range(12):
        long_chat.append(m("user", f"question {i}?"))
        long_chat.append(m("assistant", f"answer {i}."))
    long_chat.append(m("user", "last"))
    return {
        "user": [m("user", "Hello")],
        "system_user": [m("system", "You are a helpful assistant."), m("user", "Hello")],
        "multi_turn": [m("system", "Be brief."), m("user", "Hi"), m("assistant", "Hello! How can I help?"),
                       m("user", "What is 2+2?")],
        "multi_turn_no_system": [m("user", "Hi"), m("assistant", "Hello!"), m("user", "Bye")],
        "ends_with_assistant": [m("user", "Hi"), m("assistant", "Hello!")],
        "empty_content": [m("system", ""), m("user", ""), m("assistant", ""), m("user", "")],
        "unicode": [m("system", UNICODE), m("user", UNICODE), m("assistant", UNICODE), m("user", "é")],
        "tricky": [m("user", TRICKY), m("assistant", TRICKY), m("user", TRICKY)],
        "whitespace": [m("system", "  padded system \n\n"), m("user", "\n\t  padded user  \n"),
                       m("assistant", "   padded answer   "), m("user", " x ")],
        "long": long_chat,
        "two_users": [m("user", "one"), m("user", "two")],
        "assistant_first": [m("assistant", "I start"), m("user", "ok")],
        "system_only": [m("system", "Only a system message")],
        "system_in_middle": [m("user", "a"), m("system", "late system"), m("user", "b")],
        "empty": [],
        "think": [m("user", "q"), m("assistant", "<think>reasoning</think>The answer."), m("user", "more")],
        "tool_call_dict": [m("user", "Weather in Paris?"),
                           m("assistant", None, tool_calls=[tool_call("get_weather", {"city": "Paris"}, "abc123xyz")]),
                           m("tool", '{"temperature": 21, "unit": "celsius"}', tool_call_id="abc123xyz"),
                           m("assistant", "It is 21 C in Paris.")],
        "tool_call_string": [m("user", "Add 2 and 3"),
                             m("assistant", "", tool_calls=[tool_call("add", {"a": 2, "b": 3}, "xyz987abc", True)]),
                             m("tool", "5", tool_call_id="xyz987abc")],
        "two_tool_calls": [m("user", "Both?"),
                           m("assistant", None, tool_calls=[tool_call("get_weather", {"city": "Oslo"}, "aaaaaaaa1"),
                                                            tool_call("add", {"a": 1.5, "b": -2}, "bbbbbbbb2")]),
                           m("tool", "cold", tool_call_id="aaaaaaaa1"), m("tool", "-0.5", tool_call_id="bbbbbbbb2"),
                           m("user", "thanks")],
        "content_parts": [m("system", [{"type": "text", "text": "System part"}]),
                          m("user", [{"type": "text", "text": " Look: "}, {"type": "image"},
                                     {"type": "text", "text": "what is it? "}])],
        "missing_content": [{"role": "user"}],
        "numbers_in_content": [m("user", 42), m("assistant", 1.5), m("user", True)],
        "reasoning": [m("user", "q1"), m("assistant", "a1", reasoning_content="\nthought one\n"), m("user", "q2"),
                      m("assistant", "\n\na2", reasoning_content="thought two")],
        "reasoning_in_content": [m("user", "q1"), m("assistant", "<think>\nhidden\n</think>\n\nshown")],
        "tool_response_as_user": [m("user", "real question"), m("assistant", "", tool_calls=[tool_call("add", {"b": 1, "a": 2})]),
                                  m("user", "<tool_response>3</tool_response>")],
    }


def random_conversations(seed, count):
    """Seeded random message lists: roles in any order, contents mixing scripts, whitespace,
    markup-like text and escapes, tool calls with nested arguments, None and missing fields."""
    rng = random.Random(seed)
    pieces = ["hi", " ", "\n", "\t", "  ", "é", "你好", "🙂", "\u200b", "\\", '"', "'", "{{ x }}", "{% if %}",
              "<think>", "</think>", "<tool_response>", "</tool_response>", "[INST]", "<|im_end|>", "\r\n", "0", "None"]
    def text():
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
    def value(depth=0):
        r = rng.random()
        if depth > 2 or r < 0.4:
            return rng.choice([text(), rng.randint(-5, 5), rng.random() * 10, True, False, None])
        if r < 0.7:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(["b", "a", "city", "unit", "z"]) + str(i): value(depth + 1) for i in range(rng.randint(0, 3))}
    convs = []
    for _ in range(count):
        msgs = []
        for _ in range(rng.randint(1, 7)):
            role = rng.choice(["system", "user", "user", "assistant", "assistant", "tool"])
            msg = {"role": role, "content": text() if rng.random() < 0.9 else None}
            if role == "assistant" and rng.random() < 0.3:
                msg["tool_calls"] = [tool_call(rng.choice(["get_weather", "add"]),
                                               {"k" + str(i): value() for i in range(rng.randint(0, 3))},
                                               "".join(rng.choice("abc123") for _ in range(9)), rng.random() < 0.3)
                                     for _ in range(rng.randint(1, 2))]
            if role == "assistant" and rng.random() < 0.2:
                msg["reasoning_content"] = text()
            if role == "tool":
                msg["tool_call_id"] = "".join(rng.choice("abc123") for _ in range(9))
            msgs.append(msg)
        convs.append(msgs)
    return convs


def template_cases():
    cases = []
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    for name in sorted(os.listdir(TEMPLATES)):
        if not name.endswith(".jinja"):
            continue
        for conv_name, msgs in conversations().items():
            for gen in (True, False):
                c = {"template": name, "messages": msgs, "add_generation_prompt": gen, **tokens,
                     "extra": {"date_string": "24 Nov 2026"}}
                cases.append((f"{name}/{conv_name}/gen={gen}", c))
            c = {"template": name, "messages": msgs, "add_generation_prompt": True, **tokens,
                 "extra": {"tools": TOOLS, "date_string": "01 Jan 2025"}}
            cases.append((f"{name}/{conv_name}/tools", c))
        for i, msgs in enumerate(random_conversations(name, 40)):
            gen = i % 2 == 0
            extra = {"date_string": "1 Feb 2025"}
            if i % 5 == 0:
                extra["tools"] = TOOLS
            cases.append((f"{name}/random{i}", {"template": name, "messages": msgs, "add_generation_prompt": gen,
                                                **tokens, "extra": extra}))
        cases.append((f"{name}/no_thinking", {"template": name, "messages": conversations()["multi_turn"], **tokens,
                                              "extra": {"enable_thinking": False}}))
        cases.append((f"{name}/strftime_now", {"template": name, "messages": conversations()["system_user"], **tokens}))
        cases.append((f"{name}/tools_not_in_user", {"template": name, "messages": conversations()["multi_turn"], **tokens,
                                                    "extra": {"tools": TOOLS, "tools_in_user_message": False,
                                                              "date_string": "x"}}))
    ordered = []
    for case_name, c in cases:
        request = {"messages": c["messages"]}
        request.update(c.get("extra") or {})
        ordered.append((case_name + "/ordered", dict(c, request_json=json.dumps(request, ensure_ascii=False))))
    return cases + ordered


# Small templates, one language feature each, checked against jinja2 the same way.
FEATURES = [
    "{{ 'a' ~ 1 ~ none ~ true ~ 2.5 }}|{{ 1 + 2 * 3 - 4 / 2 }}|{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}",
    "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 123456789.125 }} {{ 3 / 2 }} {{ 4 / 2 }} {{ -0.0 }}",
    "{{ [1, 'a', none, true, 1.5, {'k': 'v'}, [\"q'\"]] }} {{ {'a': 1, 'b': [2]} }} {{ ('x', 1) }}",
    "{% for x in [3, 1, 2] %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex }}{{ loop.revindex0 }}"
    "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in [1,2,3,4,5] if x is odd %}{{ x }}{{ loop.length }}{% endfor %}",
    "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for k, v in {'b': 1, 'a': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for k in {'z': 1, 'y': 2} %}{{ k }}{% endfor %}",
    "{% set ns = namespace(count=0, names=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}"
    "{% set ns.names = ns.names + [m.role] %}{% endfor %}{{ ns.count }} {{ ns.names|join(',') }}",
    "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }}",
    "{{ 'abc'[::-1] }} {{ 'hello'[1:3] }} {{ [1,2,3,4][1:] }} {{ [1,2,3,4][:-1] }} {{ [1,2,3,4][::2] }} {{ 'héllo'[1] }} {{ 'héllo'[-1:] }}",
    "{{ '  x  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'Hello World'|upper }}|{{ 'Hello'|lower }}|{{ 'hello world'|capitalize }}"
    "|{{ 'hello big-world (yes)'|title }}|{{ 'a-b'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}",
    "{{ [1,2,3]|length }} {{ 'héllo'|length }} {{ {'a':1}|length }} {{ undefined_var|length }} {{ [1,2]|first }} {{ [1,2]|last }}"
    " {{ 'abc'|list }} {{ {'a': 1}|items|list }} {{ ['b','a']|join }} {{ [1,2]|join(', ') }}",
    "{{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|d('n') }} {{ '42'|int + 1 }} {{ '3.5'|float }}"
    " {{ 'x'|int }} {{ 3.9|int }} {{ 2|float }} {{ 5|string ~ '!' }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('/') }}"
    "|{{ messages|rejectattr('role', 'eq', 'user')|list|length }}|{{ messages|map(attribute='role')|unique|list }}"
    "|{{ [1,0,2,none]|select|list }}|{{ ['A','a','b']|unique|list }}",
    "{{ 'text\nmore\n\nlast'|indent(2) }}|{{ 'a\nb'|indent(4, true) }}|{{ 'a\n\nb'|indent(width=2, blank=true) }}",
    "{{ {'b': [1, 2.5, none, true], 'a': 'é\"\\\n'}|tojson }}|{{ {'k': {'n': []}, 'e': {}}|tojson(indent=2) }}"
    "|{{ 'x'|tojson }}|{{ [1]|tojson(indent=4) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}",
    "{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }}"
    " {{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is boolean }} {{ false is false }} {{ 1 is true }}"
    " {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is in 'abc' }} {{ x is undefined }} {{ 1 is not none }}"
    " {{ [] is sequence }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 2 is eq 2 }} {{ 3 is gt 2 }} {{ x is iterable }}",
    "{{ 'a' in 'abc' }} {{ 'x' not in ['a'] }} {{ 'k' in {'k': 1} }} {{ 1 in [1.0] }} {{ 1 < 2 < 3 }} {{ 'a' < 'b' }}"
    " {{ 1 == 1.0 }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ none == none }} {{ x == y }} {{ 'a' != 'b' }}",
    "{{ true and 'x' }} {{ false or 'y' }} {{ '' or [] }} {{ not 0 }} {{ 'a' if 0 else 'b' }} [{{ 'a' if false }}] {{ none or 0 }}",
    "{{ '  a b  '.strip() }}|{{ 'xax'.lstrip('x') }}|{{ 'xax'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}"
    "|{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aB'.upper() }}{{ 'aB'.lower() }}"
    "|{{ 'hello world'.title() }}|{{ 'a-b'.replace('-', '') }}|{{ 'abcb'.find('b') }}|{{ 'abcb'.count('b') }}|{{ '-'.join(['x','y']) }}",
    "{% set d = {'a': 1, 'b': 2} %}{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }}"
    " {{ d['a'] }} {{ d.a }} {{ d.missing }}|{{ d['missing'] is defined }}",
    "  {% if true %}\n    yes\n  {% endif %}\n  {# comment #}\n{{ 'v' }}\n  {%+ if true %}plus{% endif %}\n  {%- if true -%}  strip  {%- endif -%}  \n end",
    "a  {{- ' b ' -}}  c {{ 'd' }}\n\n{%- if true %}\ne{% endif -%}\n\n f {#- c -#} g\n",
    "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('you') }} {{ greet('me', punct='?') }}"
    " {{ greet(name='x') }}",
    "{% set body %}inner {{ 1 + 1 }}{% endset %}[{{ body }}]{% filter upper %}shout {{ 'x' }}{% endfilter %}",
    "{% raw %}{{ not rendered }}{% endraw %} {{ '\\u00e9\\x41\\n\\t\\'' }} {{ \"a\" 'b' }}",
    "{% generation %}gen {{ 1 }}{% endgeneration %}",
    "{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].role }} {{ messages[99] is defined }}"
    " {{ messages|length }} {{ (messages|last).role }}",
    "{{ raise_exception('custom error: ' ~ messages|length) }}",
    "{{ undefined_thing.attr }}",
    "{{ messages[0].content.content is defined }} {{ none.x is defined }} {{ 'abc'.nope is defined }}",
    "{{ 1 + 'a' }}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% for a, b in ['xy'] %}{{ b }}{{ a }}{% endfor %}",
    "{{ [3,1,2]|reverse|list }} {{ 'abc'|reverse }} {{ [1,2,3]|sum }} {{ -3|abs }} {{ 2.5|round }} {{ 3.14159|round(2) }}",
    "{{ namespace(a=1).a }} {{ dict(x=1, y='z') }} {{ range(3)|list }} {{ range(1, 10, 3)|list }}",
    "{{ '%s' }} {{ 'a' * 3 }} {{ [0] * 2 if false else 'n' }} {{ ['x'] + ['y'] }}",
    "{% if messages %}{% for m in messages %}{% if loop.first %}F{% elif loop.last %}L{% else %}M{% endif %}{% endfor %}{% endif %}",
    "{{ 'a' }}\r\n{{ 'b' }}\r{{ 'c' }}\n",
    "{{ 'T' if messages|selectattr('role', 'equalto', 'x') else 'F' }} {{ 'T' if []|reverse else 'F' }}"
    " {{ 'T' if x|items else 'F' }} {{ [1, 2]|map('string')|list }} {{ messages|selectattr('role', 'eq', 'user')|list|length }}"
    " {{ 3.0 is divisibleby 1.5 }} {{ -3 is odd }} {{ 2|round(1) }} {{ [1, 2] * 2 }} {{ 'x'|safe ~ 1|safe }}",
]


def feature_cases():
    msgs = [m("system", "sys"), m("user", "u1"), m("assistant", "a1"), m("user", "u2")]
    return [(f"feature{i}", {"source": src, "messages": msgs, "bos_token": "<s>", "eos_token": "</s>"})
            for i, src in enumerate(FEATURES)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--render-cases", required=True)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()

    named = template_cases() + feature_cases()
    cases = [c for _, c in named]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cases.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False, sort_keys=True)
        ref = subprocess.run([args.python, "-c", JINJA2_RENDERER, path, TEMPLATES], capture_output=True, check=False)
        if ref.returncode != 0:
            print("jinja2 renderer failed:\n" + ref.stderr.decode(errors="replace"), file=sys.stderr)
            return 1
        ours = subprocess.run([args.render_cases, path, TEMPLATES], capture_output=True, check=False)
        if ours.returncode != 0:
            print("render_cases failed:\n" + ours.stderr.decode(errors="replace"), file=sys.stderr)
            return 1
    expected = json.loads(ref.stdout.decode("utf-8"))
    actual = json.loads(ours.stdout.decode("utf-8", errors="surrogateescape"))
    assert len(expected) == len(actual) == len(cases)

    failures = 0
    raised = ok = 0
    for (name, case), exp, act in zip(named, expected, actual):
        problem = None
        if exp["ok"]:
            ok += 1
            if not act["ok"]:
                problem = f"jinja2 rendered, ours failed: {act['error']}"
            elif act["text"] != exp["text"]:
                problem = "outputs differ:\n  jinja2: " + repr(exp["text"]) + "\n  ours:   " + repr(act["text"])
        else:
            raised += 1
            if act["ok"]:
                problem = f"jinja2 failed ({exp['error']}), ours rendered: {act['text']!r}"
            elif exp["raised"] and act["error"] != exp["error"]:
                problem = f"raise_exception messages differ:\n  jinja2: {exp['error']!r}\n  ours:   {act['error']!r}"
        if problem:
            failures += 1
            print(f"FAIL {name}: {problem}\n")
    print(f"{len(cases)} cases ({ok} rendered by jinja2, {raised} refused by it), {failures} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
