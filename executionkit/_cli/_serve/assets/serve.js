// executionkit serve: follow a page that changes while a run goes on.
// The server renders and escapes everything; this only swaps in the fresh main
// part (and the header, which counts the questions waiting), every half second,
// while the server says the page is live.
"use strict";

(function () {
  const main = document.getElementById("main");
  if (!main || !main.dataset.live) {
    return;
  }
  const url = main.dataset.live;

  async function poll() {
    let state;
    try {
      const response = await fetch(url, { cache: "no-store", credentials: "same-origin" });
      if (!response.ok) {
        throw new Error("status " + response.status);
      }
      state = await response.json();
    } catch (error) {
      main.dataset.followError = String(error);
      window.setTimeout(poll, 2000);
      return;
    }
    // A timeline row's <details> the reader opened stays open across the swap.
    const opened = new Set();
    for (const row of main.querySelectorAll("[data-part]")) {
      if (row.querySelector(":scope > details[open]")) {
        opened.add(row.dataset.part);
      }
    }
    main.innerHTML = state.html;
    for (const row of main.querySelectorAll("[data-part]")) {
      const details = row.querySelector(":scope > details");
      if (details && opened.has(row.dataset.part)) {
        details.open = true;
      }
    }
    const header = document.querySelector("body > header");
    if (header && typeof state.header === "string") {
      header.innerHTML = state.header;
    }
    if (state.live) {
      window.setTimeout(poll, 500);
    } else {
      delete main.dataset.live;
      main.dataset.followed = "done";
    }
  }

  window.setTimeout(poll, 500);

  // The text running steps stream (current_step().stream): asked for every 100 ms,
  // from what the server's events said (no store read), and set as text only.
  const stream = main.dataset.stream;
  if (!stream) {
    return;
  }

  function showStream(name, attempt, text) {
    let shown = null;
    for (const pre of main.querySelectorAll("pre.streamed")) {
      if (pre.dataset.streamStep === name) {
        shown = pre;
      }
    }
    if (!shown) {
      let row = null;
      for (const candidate of main.querySelectorAll("tr.step-row")) {
        if (candidate.dataset.step === name) {
          row = candidate;
        }
      }
      const cells = row ? row.querySelectorAll("td") : [];
      if (cells.length < 7) {
        return;
      }
      shown = document.createElement("pre");
      shown.className = "streamed";
      shown.dataset.streamStep = name;
      cells[6].appendChild(shown);
    }
    shown.dataset.attempt = String(attempt);
    shown.textContent = text;
  }

  async function follow() {
    let state;
    try {
      const response = await fetch(stream, { cache: "no-store", credentials: "same-origin" });
      state = await response.json();
    } catch (error) {
      window.setTimeout(follow, 1000);
      return;
    }
    for (const [name, piece] of Object.entries(state.steps || {})) {
      showStream(name, piece.attempt, piece.text);
    }
    if (state.live) {
      window.setTimeout(follow, 100);
    }
  }

  window.setTimeout(follow, 100);
})();
