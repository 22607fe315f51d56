// The playground: a chat with a base model or one of the tenant's checkpoints through
// the server's OpenAI-compatible route, streamed; the prompt the model's chat template
// renders is shown beside it (POST /oai/api/v1/chat/render).
"use strict";

(function () {
  const model = document.getElementById("model");
  const prompt = document.getElementById("prompt");
  const send = document.getElementById("send");
  const reset = document.getElementById("reset");
  const reply = document.getElementById("reply");
  const rendered = document.getElementById("rendered-template");
  const renderedTokens = document.getElementById("rendered-tokens");
  const conversation = document.getElementById("conversation");
  const status = document.getElementById("play-status");
  if (!model || !send) return;
  let history = [];
  let busy = null;

  function params() {
    return {
      temperature: Number(document.getElementById("temperature").value),
      top_p: Number(document.getElementById("top-p").value),
      max_tokens: Math.floor(Number(document.getElementById("max-tokens").value)),
    };
  }

  function show(role, text) {
    const d = tuft.el("div", { class: "msg " + role });
    d.appendChild(tuft.el("span", { class: "role" }, role));
    const body = tuft.el("span", { class: "text" }, text);
    d.appendChild(body);
    conversation.appendChild(d);
    return body;
  }

  async function render(messages) {
    const resp = await tuft.api("POST", "/oai/api/v1/chat/render", { model: model.value, messages: messages });
    if (!resp.ok) {
      rendered.textContent = "";
      renderedTokens.textContent = "render failed: " + (await tuft.errorText(resp));
      return false;
    }
    const d = await resp.json();
    rendered.textContent = d.prompt;
    renderedTokens.textContent = d.prompt_tokens + " prompt tokens";
    return true;
  }

  // stream reads the chat completion's server-sent events into the reply as they come.
  async function stream(resp, into) {
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "", text = "";
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      buf += dec.decode(r.value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        for (const line of ev.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return text;
          let j;
          try { j = JSON.parse(data); } catch (e) { continue; }
          if (j.error) throw new Error(j.error.message || "generation failed");
          const c = j.choices && j.choices[0];
          if (c && c.delta && typeof c.delta.content === "string") {
            text += c.delta.content;
            into.textContent = text;
            reply.textContent = text;
          }
        }
      }
    }
    return text;
  }

  async function go() {
    const text = prompt.value;
    if (!text.trim() || busy) return;
    const messages = history.concat([{ role: "user", content: text }]);
    busy = new AbortController();
    send.disabled = true;
    status.textContent = "rendering…";
    reply.textContent = "";
    try {
      if (!(await render(messages))) {
        status.textContent = "";
        return;
      }
      show("user", text);
      const out = show("assistant", "");
      status.textContent = "generating…";
      const body = Object.assign({ model: model.value, messages: messages, stream: true }, params());
      const resp = await tuft.api("POST", "/oai/api/v1/chat/completions", body, { signal: busy.signal });
      if (!resp.ok) {
        const msg = await tuft.errorText(resp);
        out.textContent = "";
        status.textContent = "refused: " + msg;
        return;
      }
      const answer = await stream(resp, out);
      history = messages.concat([{ role: "assistant", content: answer }]);
      prompt.value = "";
      status.textContent = "done";
    } catch (e) {
      status.textContent = "failed: " + e.message;
    } finally {
      busy = null;
      send.disabled = false;
    }
  }

  send.addEventListener("click", go);
  prompt.addEventListener("keydown", function (e) {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) go();
  });
  reset.addEventListener("click", function () {
    if (busy) busy.abort();
    history = [];
    conversation.replaceChildren();
    reply.textContent = "";
    rendered.textContent = "";
    renderedTokens.textContent = "";
    status.textContent = "";
  });
  // The template's rendering follows the conversation as it is typed and the model chosen.
  let typing = 0;
  function preview() {
    window.clearTimeout(typing);
    typing = window.setTimeout(function () {
      if (busy) return;
      const msgs = prompt.value.trim() ? history.concat([{ role: "user", content: prompt.value }]) : history;
      if (msgs.length) render(msgs);
    }, 400);
  }
  prompt.addEventListener("input", preview);
  model.addEventListener("change", preview);
})();
