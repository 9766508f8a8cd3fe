// kubectl configrollout dashboard: live updates and actions. Embedded in the binary.
"use strict";
(function () {
  const token = document.querySelector('meta[name="dashboard-token"]').content;
  const live = document.getElementById("live");
  const badge = document.getElementById("connection");
  const outcome = document.getElementById("outcome");
  let pending = null;

  // While someone types into a form of the live part (an approval's reason), or has
  // put the cursor in one, updates wait, so that the form is not replaced under them
  // (which would drop the text or the focus); the latest is applied after.
  function editing() {
    const focused = document.activeElement;
    if (focused && focused.tagName === "INPUT" && live.contains(focused)) return true;
    return Array.prototype.some.call(live.querySelectorAll("input[type=text]"), function (input) {
      return input.value !== "";
    });
  }

  // The revision the approve form in `root` names, if there is one.
  function approving(root) {
    const input = root.querySelector("form.action input[name=revision]");
    return input ? input.value : null;
  }

  // While updates wait, says so on the approve form when the rollout has moved on to
  // another revision: the form still names the one the approver read, which the
  // dashboard will refuse to approve.
  function noteNewerRevision(html) {
    const shown = approving(live);
    const note = live.querySelector("form.action .stale-note");
    if (shown === null || !note) return;
    const next = document.createElement("template");
    next.innerHTML = html;
    const arriving = approving(next.content);
    if (arriving === shown) return;
    note.hidden = false;
    note.textContent = arriving === null
      ? "The rollout has moved on: " + shown + " no longer awaits this approval, which will be refused."
      : "A newer revision, " + arriving + ", arrived: this form approves " + shown +
        ", which will be refused. Clear the reason to see " + arriving + ".";
  }

  function apply(html) {
    if (editing()) { pending = html; noteNewerRevision(html); return; }
    pending = null;
    live.innerHTML = html;
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  }

  function flush() {
    if (pending !== null && !editing()) apply(pending);
  }
  document.addEventListener("input", flush);
  // Focus has left by the time the event after focusout runs.
  document.addEventListener("focusout", function () { setTimeout(flush, 0); });

  // Server-sent events driven by the dashboard's watch of the API server: each message
  // is the live part of the page, rendered by the server.
  if (live && live.dataset.stream && window.EventSource) {
    const source = new EventSource(live.dataset.stream);
    source.onopen = function () { badge.textContent = "live"; badge.className = "connection live"; };
    source.onerror = function () { badge.textContent = "reconnecting"; badge.className = "connection lost"; };
    source.onmessage = function (message) { apply(message.data); };
  }

  // Actions: posted with the page's token; the answer (or the API server's refusal)
  // is shown as is.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!form.classList.contains("action")) return;
    event.preventDefault();
    const button = form.querySelector("button");
    if (button) button.disabled = true;
    const body = new URLSearchParams(new FormData(form)).toString();
    fetch(form.getAttribute("action"), {
      method: "POST",
      headers: { "X-Dashboard-Token": token, "Content-Type": "application/x-www-form-urlencoded" },
      body: body,
      credentials: "same-origin",
    }).then(function (response) {
      return response.text().then(function (text) {
        outcome.hidden = false;
        outcome.className = "outcome " + (response.ok ? "ok" : "refused");
        outcome.textContent = text;
        if (response.ok) form.reset();
        flush();
      });
    }).catch(function (error) {
      outcome.hidden = false;
      outcome.className = "outcome refused";
      outcome.textContent = "the dashboard did not answer: " + error;
    }).finally(function () { if (button) button.disabled = false; });
  });
})();
