// Reload a page that asks for it (data-refresh, in seconds), unless the person is typing in one of its fields.
(function () {
  "use strict";
  var seconds = Number(document.body.dataset.refresh || 0);
  if (!seconds) {
    return;
  }
  setInterval(function () {
    var active = document.activeElement;
    var typing = active && (active.tagName === "INPUT" || active.tagName === "SELECT" || active.tagName === "TEXTAREA");
    if (!typing && !document.hidden) {
      window.location.reload();
    }
  }, seconds * 1000);
})();
