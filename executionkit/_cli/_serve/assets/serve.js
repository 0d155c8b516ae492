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
    main.innerHTML = state.html;
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
})();
