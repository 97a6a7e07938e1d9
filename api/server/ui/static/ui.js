// wikiq status page: re-read the page's parts from its JSON endpoint every second, without a reload.
"use strict";
(function () {
  const url = document.body.dataset.poll;
  const live = document.getElementById("live");
  if (!url || !live) return;
  const shown = {};
  let timer = null;
  let done = false;

  function later(ms) {
    clearTimeout(timer);
    timer = setTimeout(tick, ms);
  }

  function mark(text, cls) {
    live.textContent = text;
    live.className = "live " + cls;
  }

  async function tick() {
    if (document.hidden) return; // resumed by visibilitychange
    try {
      const answer = await fetch(url, {
        headers: { Accept: "application/json" },
        cache: "no-store",
        credentials: "same-origin",
      });
      if (!answer.ok) throw new Error("HTTP " + answer.status);
      const data = await answer.json();
      for (const [id, html] of Object.entries(data.parts)) {
        const el = document.getElementById(id);
        if (el && shown[id] !== html) {
          el.innerHTML = html; // rendered and escaped by the server's templates
          shown[id] = html;
        }
      }
      if (data.done) {
        done = true;
        mark("final", "final");
        return;
      }
      mark("live", "");
    } catch (err) {
      mark("offline, retrying", "off");
    }
    later(1000);
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && !done) later(0);
  });
  later(1000);
})();
