// executionkit serve: follow a page that changes while a run goes on.
// The server renders and escapes everything; this only swaps in what changed
// every half second while the server says the page is live: the parts of the
// main (elements with data-part) that differ from the render on screen, the
// children that came, went or moved in its lists (data-list), or the whole main
// when more changed, and the header (which counts the questions).
"use strict";

(function () {
  const main = document.getElementById("main");
  if (!main || !main.dataset.live) {
    return;
  }
  const url = main.dataset.live;
  // The version of the main on screen: the server sends what changed since it.
  let version = main.dataset.version || "";

  // Which parts have a <details> the reader opened: it stays open across a swap.
  function openedIn(root) {
    const opened = new Set();
    for (const part of root.querySelectorAll("[data-part]")) {
      if (part.querySelector(":scope > details[open]")) {
        opened.add(part.dataset.part);
      }
    }
    return opened;
  }

  function reopen(parts, opened) {
    for (const part of parts) {
      const details = part.querySelector(":scope > details");
      if (details && opened.has(part.dataset.part)) {
        details.open = true;
      }
    }
  }

  // Swap in the parts that changed; false when one is not on the page (ask for all).
  function swapParts(parts) {
    const found = new Map();
    for (const element of main.querySelectorAll("[data-part]")) {
      if (!found.has(element.dataset.part)) {
        found.set(element.dataset.part, element);
      }
    }
    const opened = openedIn(main);
    const fresh = [];
    for (const [key, markup] of Object.entries(parts)) {
      const element = found.get(key);
      if (!element) {
        return false;
      }
      const parent = element.parentNode;
      const before = element.previousSibling;
      element.insertAdjacentHTML("beforebegin", markup);
      const swapped = before ? before.nextSibling : parent.firstChild;
      element.remove();
      if (swapped && swapped.nodeType === Node.ELEMENT_NODE) {
        fresh.push(swapped, ...swapped.querySelectorAll("[data-part]"));
      }
    }
    reopen(fresh, opened);
    return true;
  }

  // Apply what changed in each list (data-list): its children kept ("k", n), deleted
  // ("d", n) and inserted ("i", markup), in order, and its opening tag's attributes;
  // false when a list is missing or the operations do not fit it (ask for all).
  function applyLists(lists) {
    const found = new Map();
    for (const element of main.querySelectorAll("[data-list]")) {
      if (!found.has(element.dataset.list)) {
        found.set(element.dataset.list, element);
      }
    }
    const opened = openedIn(main);
    const fresh = [];
    for (const [key, change] of Object.entries(lists)) {
      const list = found.get(key);
      if (!list) {
        return false;
      }
      const children = Array.from(list.children);
      let at = 0;
      for (const [kind, value] of change.ops || []) {
        if (kind === "k") {
          at += value;
        } else if (kind === "d") {
          for (let n = 0; n < value; n += 1) {
            if (at >= children.length) {
              return false;
            }
            children[at].remove();
            at += 1;
          }
        } else {
          const next = at < children.length ? children[at] : null;
          const before = next ? next.previousElementSibling : list.lastElementChild;
          if (next) {
            next.insertAdjacentHTML("beforebegin", value);
          } else {
            list.insertAdjacentHTML("beforeend", value);
          }
          let added = before ? before.nextElementSibling : list.firstElementChild;
          while (added && added !== next) {
            fresh.push(added, ...added.querySelectorAll("[data-part]"));
            added = added.nextElementSibling;
          }
        }
      }
      if (change.ops && at !== children.length) {
        return false;
      }
      if (change.attrs) {
        for (const name of list.getAttributeNames()) {
          if (!(name in change.attrs)) {
            list.removeAttribute(name);
          }
        }
        for (const [name, value] of Object.entries(change.attrs)) {
          if (list.getAttribute(name) !== value) {
            list.setAttribute(name, value);
          }
        }
      }
    }
    reopen(fresh, opened);
    return true;
  }

  async function poll() {
    let state;
    try {
      const asked = version ? url + "&since=" + encodeURIComponent(version) : url;
      const response = await fetch(asked, { cache: "no-store", credentials: "same-origin" });
      if (!response.ok) {
        throw new Error("status " + response.status);
      }
      state = await response.json();
    } catch (error) {
      main.dataset.followError = String(error);
      window.setTimeout(poll, 2000);
      return;
    }
    if (typeof state.html === "string") {
      const opened = openedIn(main);
      main.innerHTML = state.html;
      reopen(main.querySelectorAll("[data-part]"), opened);
      version = state.v || "";
    } else if (
      (state.lists && !applyLists(state.lists)) ||
      (state.parts && !swapParts(state.parts))
    ) {
      version = "";  // a list or a part was missing: the next poll asks for the whole main
    } else {
      version = state.v || "";
    }
    main.dataset.version = version;
    const header = document.querySelector("body > header");
    if (header && typeof state.header === "string") {
      header.innerHTML = state.header;
    }
    if (state.live) {
      window.setTimeout(poll, version ? 500 : 0);
    } else {
      delete main.dataset.live;
      main.dataset.followed = "done";
    }
  }

  window.setTimeout(poll, 500);

  // The text running steps stream (current_step().stream): asked for every 100 ms
  // (from the server's events, or from the store where another process keeps it),
  // and set as text only.
  const stream = main.dataset.stream;
  if (!stream) {
    return;
  }

  // The <pre> of a step's own text (item undefined) or of one item of a map.
  function streamedOf(name, item) {
    for (const pre of main.querySelectorAll("pre.streamed")) {
      if (pre.dataset.streamStep === name && pre.dataset.streamItem === item) {
        return pre;
      }
    }
    return null;
  }

  function showStream(name, attempt, text, item) {
    let shown = streamedOf(name, item);
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
      if (item === undefined) {
        cells[6].appendChild(shown);
      } else {
        shown.dataset.streamItem = item;
        const box = document.createElement("div");
        box.className = "streamed-item";
        const label = document.createElement("span");
        label.className = "item-key";
        label.textContent = "item " + item;
        box.append(label, shown);
        cells[6].appendChild(box);
      }
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
    const steps = state.steps || {};
    for (const [name, piece] of Object.entries(steps)) {
      if (typeof piece.text === "string") {
        showStream(name, piece.attempt, piece.text, undefined);
      }
      for (const [item, part] of Object.entries(piece.items || {})) {
        showStream(name, part.attempt, part.text, item);
      }
    }
    // A step or an item that ended streams no more: its text goes (its output shows
    // as recorded).
    for (const pre of main.querySelectorAll("pre.streamed")) {
      const piece = steps[pre.dataset.streamStep];
      const item = pre.dataset.streamItem;
      if (item === undefined) {
        if (!piece || typeof piece.text !== "string") {
          pre.remove();
        }
      } else if (!piece || !piece.items || !(item in piece.items)) {
        pre.closest("div.streamed-item").remove();
      }
    }
    if (state.live) {
      window.setTimeout(follow, 100);
    }
  }

  window.setTimeout(follow, 100);
})();
