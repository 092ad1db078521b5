// Progressive enhancement for the kb-bridge console: every page works without this file.
// It adds the delete confirmation, the upload's progress bar and the live job status.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
        return;
      }
      form.querySelector('input[name="confirmed"]').value = "yes";
    });
  }
  const upload = document.getElementById("upload-form");
  if (upload) upload.addEventListener("submit", (event) => sendUpload(event, upload));
});

function say(text, link) {
  const status = document.getElementById("upload-status");
  status.textContent = text;
  if (link) {
    const a = document.createElement("a");
    a.href = link.href;
    a.textContent = link.text;
    status.append(" ", a);
  }
}

function sendUpload(event, form) {
  event.preventDefault();
  const bar = document.getElementById("upload-progress");
  const button = form.querySelector('button[type="submit"]');
  const request = new XMLHttpRequest();
  request.open("POST", form.action);
  request.setRequestHeader("Accept", "application/json");
  request.upload.addEventListener("progress", (e) => {
    if (e.lengthComputable) {
      bar.hidden = false;
      bar.value = Math.round((100 * e.loaded) / e.total);
      say(`Sending: ${bar.value} %`);
    }
  });
  request.addEventListener("load", () => {
    button.disabled = false;
    let reply = {};
    try { reply = JSON.parse(request.responseText); } catch (_) { /* an HTML error page */ }
    if (request.status !== 200 || !reply.job) {
      say(`The upload was refused: ${reply.error || request.statusText || request.status}`);
      return;
    }
    bar.value = 100;
    if (!reply.url) {
      // The token may upload but not read jobs (kb_jobs needs kb:read): nothing to follow.
      say(`Sent for indexing as job ${reply.job.id}; it becomes searchable once the job is done.`);
      return;
    }
    say(`Sent. Indexing (job ${reply.job.id})…`);
    watch(reply.url);
  });
  request.addEventListener("error", () => { button.disabled = false; say("The upload failed: the connection broke."); });
  button.disabled = true;
  say("Sending: 0 %");
  request.send(new FormData(form));
}

function watch(url) {
  // redirect "manual": a session that ended answers with a redirect to sign-in, which must stop the polling.
  fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin", redirect: "manual" })
    .then((response) => {
      if (response.ok) return response.json();
      if (response.type === "opaqueredirect" || response.status === 401) throw new Stop("Signed out: sign in again to follow the job.");
      if (response.status >= 500) throw new Error("the server or the engine failed: try again"); // passing
      return response.json().then((reply) => { throw new Stop(`Cannot follow the job: ${reply.error || response.status}`); },
                                  () => { throw new Stop(`Cannot follow the job: ${response.status}`); });
    })
    .then((job) => {
      if (job.status === "done") {
        say("Indexed and searchable:", { href: `/ui/documents/${job.document_id}`, text: job.filename || `document ${job.document_id}` });
      } else if (job.status === "failed") {
        say(`Indexing failed: ${job.error || "no reason given"}`);
      } else {
        say(`Indexing (job ${job.id} is ${job.status})…`);
        setTimeout(() => watch(url), 500);
      }
    })
    .catch((error) => {
      if (error instanceof Stop) say(error.message);
      else setTimeout(() => watch(url), 1000); // the connection broke, or a passing failure: try again
    });
}

class Stop extends Error {}
