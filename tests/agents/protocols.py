"""The three model wire protocols the agents speak, each reduced to the same view of a turn.

Rules owned here: a protocol says which requests are model turns (`kind`), reads one into a `Turn`
(the tools offered, every tool call of the conversation with the result the model was sent, the
system text, and all the text the request carries), and writes the scripted actions back the way
that API streams them. Codex: OpenAI Responses API over SSE. Gemini CLI: `streamGenerateContent?alt=sse`
(and the plain `generateContent` it uses for side questions). Copilot CLI: OpenAI chat completions
over SSE.
"""

import json
import uuid


def _new_id(prefix):
    return prefix + uuid.uuid4().hex[:20]


def strings(x, out=None):
    """Every string inside a JSON value, in order (what a model could read of it)."""
    out = [] if out is None else out
    if isinstance(x, str):
        out.append(x)
    elif isinstance(x, list):
        for y in x:
            strings(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            strings(y, out)
    return out


class Turn:
    """One model request, protocol-neutral.

    tools: {name: description} offered; calls: [{"name", "args", "id", "text"?}] in order, "text" being
    the result the model was sent for it; system: the system / instructions text; user: the user
    messages' texts; text: every string of the request joined (what the model could read); context:
    the same without the tool definitions (the conversation itself)."""

    def __init__(self, body, tools, calls, system, user):
        self.body = body
        self.tools = tools
        self.calls = calls
        self.system = system
        self.user = user
        self.text = "\n".join(strings(body))
        self.context = "\n".join(strings({k: v for k, v in body.items() if k != "tools"}))

    def results(self, name_part):
        """The texts of the results of calls whose tool name contains name_part."""
        return [c.get("text") for c in self.calls if name_part in c["name"]]


def _loads(s):
    try:
        return json.loads(s) if isinstance(s, str) else (s or {})
    except ValueError:
        return {"_raw": s}


def _example(schema):
    """The smallest value that fits a JSON schema (Gemini's upper-case type names too)."""
    if schema.get("enum"):
        return schema["enum"][0]
    typ = str(schema.get("type", "object")).lower()
    if typ == "object":
        props = schema.get("properties") or {}
        return {k: _example(v) for k, v in props.items()}
    return {"string": "n/a", "integer": 1, "number": 1, "boolean": False, "array": []}.get(typ)


def _sse(event, data):
    head = "event: %s\n" % event if event else ""
    return (head + "data: %s\n\n" % json.dumps(data)).encode("utf-8")


class Responses:
    """OpenAI Responses API (`POST .../responses`, `stream: true`), as Codex's custom providers use it."""

    def __init__(self):
        self.namespaced = {}  # "mcp__kg__kg_read" -> ("mcp__kg", "kg_read"): how Codex groups MCP tools

    def auto(self, kind, body):
        return None

    def kind(self, method, path, body):
        if method == "POST" and path.split("?")[0].endswith("/responses") and isinstance(body, dict):
            return "stream"
        return None

    def side_answer(self, method, path):
        return {"object": "list", "data": []} if path.split("?")[0].endswith("/models") else {}

    @staticmethod
    def _full(namespace, name):
        return "%s__%s" % (namespace, name) if namespace else name

    def turn(self, body, path):
        tools = {}
        for t in body.get("tools") or []:
            if t.get("type") == "namespace":  # MCP tools grouped under their server, the server's
                for sub in t.get("tools") or []:  # instructions as the group's description
                    full = self._full(t.get("name"), sub.get("name"))
                    self.namespaced[full] = (t.get("name"), sub.get("name"))
                    tools[full] = "%s\n%s" % (t.get("description", ""), sub.get("description", ""))
            elif t.get("name"):
                tools[t["name"]] = t.get("description", "")
        calls, by_id, user, system = [], {}, [], []
        for item in body.get("input") or []:
            typ = item.get("type")
            if typ in ("function_call", "custom_tool_call", "local_shell_call"):
                c = {"name": self._full(item.get("namespace"), item.get("name") or typ), "id": item.get("call_id"),
                     "args": _loads(item.get("arguments") if "arguments" in item else item.get("input"))}
                calls.append(c)
                by_id[c["id"]] = c
            elif typ in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
                c = by_id.get(item.get("call_id"))
                out = item.get("output")
                if c is not None and "text" not in c:
                    c["text"] = out if isinstance(out, str) else "\n".join(
                        strings([o.get("text") for o in out or [] if isinstance(o, dict)]))
            elif typ == "message" or ("role" in item and "content" in item):
                if item.get("role") == "user":
                    user.append("\n".join(strings(item.get("content"))))
                elif item.get("role") in ("developer", "system"):
                    system.append("\n".join(strings(item.get("content"))))
        return Turn(body, tools, calls, "\n".join([body.get("instructions") or ""] + system), user)

    def answer(self, kind, body, path, actions):
        rid = _new_id("resp_")
        chunks = [_sse("response.created", {"type": "response.created", "response": {"id": rid}})]
        for i, a in enumerate(actions):
            if a["type"] == "text":
                mid = _new_id("msg_")
                item = {"type": "message", "role": "assistant", "id": mid,
                        "content": [{"type": "output_text", "text": a["text"], "annotations": []}]}
                chunks.append(_sse("response.output_item.added", {
                    "type": "response.output_item.added", "output_index": i,
                    "item": dict(item, content=[])}))
                chunks.append(_sse("response.output_text.delta", {
                    "type": "response.output_text.delta", "item_id": mid, "output_index": i,
                    "content_index": 0, "delta": a["text"]}))
            else:
                ns, name = self.namespaced.get(a["name"], (None, a["name"]))
                item = {"type": "function_call", "id": _new_id("fc_"), "call_id": _new_id("call_"),
                        "name": name, "arguments": json.dumps(a["args"])}
                if ns:
                    item["namespace"] = ns
                chunks.append(_sse("response.output_item.added", {
                    "type": "response.output_item.added", "output_index": i, "item": item}))
            chunks.append(_sse("response.output_item.done", {
                "type": "response.output_item.done", "output_index": i, "item": item}))
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
        chunks.append(_sse("response.completed", {"type": "response.completed",
                                                  "response": {"id": rid, "usage": usage}}))
        return "text/event-stream", chunks


class Gemini:
    """Gemini API (`:streamGenerateContent?alt=sse` for the conversation, `:generateContent` beside it)."""

    def kind(self, method, path, body):
        p = path.split("?")[0]
        if method != "POST" or not isinstance(body, dict):
            return None
        if p.endswith(":streamGenerateContent"):
            return "stream"
        if p.endswith(":generateContent"):
            config = body.get("generationConfig") or {}
            return "schema" if config.get("responseMimeType") == "application/json" else "json"
        return None

    def auto(self, kind, body):
        """A side question that wants JSON (model routing, next-speaker checks): a minimal valid answer,
        so the CLI neither retries with backoff nor asks the scripted model."""
        if kind != "schema":
            return None
        schema = (body.get("generationConfig") or {}).get("responseJsonSchema") or {}
        return [{"type": "text", "text": json.dumps(_example(schema))}]

    def side_answer(self, method, path):
        if path.split("?")[0].endswith(":countTokens"):
            return {"totalTokens": 100}
        return {}

    def turn(self, body, path):
        tools = {}
        for group in body.get("tools") or []:
            for f in group.get("functionDeclarations") or []:
                tools[f.get("name")] = f.get("description", "")
        calls, user = [], []
        for msg in body.get("contents") or []:
            for part in msg.get("parts") or []:
                if "functionCall" in part:
                    fc = part["functionCall"]
                    calls.append({"name": fc.get("name"), "args": fc.get("args") or {}, "id": fc.get("id")})
                elif "functionResponse" in part:
                    fr = part["functionResponse"]
                    match = [c for c in calls if "text" not in c and
                             (c["id"] == fr.get("id") if fr.get("id") else c["name"] == fr.get("name"))]
                    if match:
                        match[0]["text"] = "\n".join(strings(fr.get("response")))
                        match[0]["response"] = fr.get("response")
                elif "text" in part and msg.get("role") == "user":
                    user.append(part["text"])
        system = "\n".join(strings((body.get("systemInstruction") or {}).get("parts")))
        return Turn(body, tools, calls, system, user)

    def _candidate(self, actions):
        parts = []
        for a in actions:
            if a["type"] == "text":
                parts.append({"text": a["text"]})
            else:
                parts.append({"functionCall": {"name": a["name"], "args": a["args"]}})
        return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
                "modelVersion": "gemini-2.5-flash", "responseId": _new_id("r")}

    def answer(self, kind, body, path, actions):
        data = self._candidate(actions)
        if kind != "stream":
            return "application/json", [json.dumps(data).encode("utf-8")]
        return "text/event-stream", [("data: %s\r\n\r\n" % json.dumps(data)).encode("utf-8")]


class Chat:
    """OpenAI chat completions (`POST .../chat/completions`, `stream: true`), as Copilot CLI's BYOK provider uses it."""

    def auto(self, kind, body):
        return None

    def kind(self, method, path, body):
        if method == "POST" and path.split("?")[0].endswith("/chat/completions") and isinstance(body, dict):
            return "stream" if body.get("stream") else "json"
        return None

    def side_answer(self, method, path):
        if path.split("?")[0].endswith("/models"):
            return {"object": "list", "data": []}
        return {}

    def turn(self, body, path):
        tools = {}
        for t in body.get("tools") or []:
            f = t.get("function") or {}
            tools[f.get("name")] = f.get("description", "")
        calls, by_id, system, user = [], {}, [], []
        for msg in body.get("messages") or []:
            role = msg.get("role")
            if role in ("system", "developer"):
                system.extend(strings(msg.get("content")))
            elif role == "user":
                user.append("\n".join(strings(msg.get("content"))))
            elif role == "assistant":
                for tc in msg.get("tool_calls") or []:
                    f = tc.get("function") or {}
                    c = {"name": f.get("name"), "args": _loads(f.get("arguments")), "id": tc.get("id")}
                    calls.append(c)
                    by_id[c["id"]] = c
            elif role == "tool":
                c = by_id.get(msg.get("tool_call_id"))
                if c is not None and "text" not in c:
                    c["text"] = "\n".join(strings(msg.get("content")))
        return Turn(body, tools, calls, "\n".join(system), user)

    def answer(self, kind, body, path, actions):
        cid, model = _new_id("chatcmpl-"), body.get("model") or "gpt-4.1"
        text = "".join(a["text"] for a in actions if a["type"] == "text")
        tcs = [{"index": i, "id": _new_id("call_"), "type": "function",
                "function": {"name": a["name"], "arguments": json.dumps(a["args"])}}
               for i, a in enumerate(a for a in actions if a["type"] == "call")]
        finish = "tool_calls" if tcs else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}

        def chunk(delta, fin=None, **extra):
            d = {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": fin}]}
            d.update(extra)
            return d
        if kind == "json":
            msg = {"role": "assistant", "content": text or None}
            if tcs:
                msg["tool_calls"] = [{k: v for k, v in t.items() if k != "index"} for t in tcs]
            return "application/json", [json.dumps({
                "id": cid, "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": msg, "finish_reason": finish}], "usage": usage}).encode("utf-8")]
        events = [chunk({"role": "assistant", "content": ""})]
        if text:
            events.append(chunk({"content": text}))
        if tcs:
            events.append(chunk({"tool_calls": tcs}))
        events.append(chunk({}, finish))
        events.append({"id": cid, "object": "chat.completion.chunk", "created": 0, "model": model,
                       "choices": [], "usage": usage})
        out = [("data: %s\n\n" % json.dumps(e)).encode("utf-8") for e in events]
        out.append(b"data: [DONE]\n\n")
        return "text/event-stream", out


PROTOCOLS = {"responses": Responses, "gemini": Gemini, "chat": Chat}
