// Progressive enhancement for the kb-bridge console: every page works without this file.
// It adds the delete confirmation, the upload's progress bar and each uploaded file's live job status.
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

function say(text) {
  tell(document.getElementById("upload-status"), text);
}

function tell(status, text, link) {
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
    try { reply = JSON.parse(request.responseText); } catch (_) { /* not JSON: say the status */ }
    if (!reply.jobs) {
      say(`The upload was refused: ${reply.error || request.statusText || request.status}`);
      return;
    }
    // A later file refused: the earlier ones are queued all the same, so they are listed with the refusal.
    const sentText = reply.jobs.length === 1 ? "Sent." : `Sent ${reply.jobs.length} files.`;
    bar.value = 100;
    say(reply.error ? `${sentText} Then ${reply.error}` : sentText);
    const list = document.getElementById("upload-jobs");
    list.replaceChildren();
    for (const sent of reply.jobs) {
      const item = document.createElement("li");
      item.setAttribute("role", "status");
      list.append(item);
      if (!sent.url) {
        // The token may upload but not read jobs (kb_jobs needs kb:read): nothing to follow.
        tell(item, `${sent.job.filename}: sent for indexing as job ${sent.job.id}; it becomes searchable once the job is done.`);
      } else {
        tell(item, `${sent.job.filename}: indexing (job ${sent.job.id})…`);
        watch(sent.url, item);
      }
    }
  });
  request.addEventListener("error", () => { button.disabled = false; say("The upload failed: the connection broke."); });
  button.disabled = true;
  say("Sending: 0 %");
  request.send(new FormData(form));
}

function watch(url, item) {
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
        tell(item, "Indexed and searchable:", { href: `/ui/documents/${job.document_id}`, text: job.filename || `document ${job.document_id}` });
      } else if (job.status === "failed") {
        tell(item, `${job.filename || `job ${job.id}`}: indexing failed: ${job.error || "no reason given"}`);
      } else {
        tell(item, `${job.filename || "file"}: indexing (job ${job.id} is ${job.status})…`);
        setTimeout(() => watch(url, item), 500);
      }
    })
    .catch((error) => {
      if (error instanceof Stop) tell(item, error.message);
      else setTimeout(() => watch(url, item), 1000); // the connection broke, or a passing failure: try again
    });
}

class Stop extends Error {}

// The jobs page's live status: while a job on the page is queued or running, ask the page's own URL for
// JSON (the same jobs) and update the rows in place; without this script the page refreshes itself.
document.addEventListener("DOMContentLoaded", () => {
  const table = document.getElementById("jobs-table");
  if (table && table.dataset.live) followJobs(table, table.dataset.live);
});

function followJobs(table, url) {
  fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin", redirect: "manual" })
    .then((response) => {
      if (!response.ok) throw new Stop(`${response.status}`);
      return response.json();
    })
    .then((reply) => {
      let live = false;
      for (const job of reply.jobs) {
        const row = table.querySelector(`tr[data-job="${job.id}"]`);
        if (!row) continue;
        live = live || job.live;
        for (const field of ["status", "finished", "duration", "error"]) {
          const cell = row.querySelector(`[data-field="${field}"]`);
          const value = job[field] || "";
          if (cell && cell.textContent !== value) cell.textContent = value;
        }
        const cell = row.querySelector('[data-field="document"]');
        if (cell && job.document_url && !cell.querySelector("a")) {
          const a = document.createElement("a");
          a.href = job.document_url;
          a.textContent = `Document ${job.document_id}`;
          cell.append(a);
        }
      }
      if (live) setTimeout(() => followJobs(table, url), 1000);
    })
    .catch((error) => {
      if (!(error instanceof Stop)) setTimeout(() => followJobs(table, url), 2000); // a passing failure
    });
}
