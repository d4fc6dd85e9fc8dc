// After the challenge: with a return_url the page links to it, and this
// follows the link at once (a navigation, not a redirect of the form's
// post, so the page's policy names no other origin). In the card field's
// frame, it tells the card field that framed this challenge that it is
// over; the card field is served by the same origin and nothing is sent
// anywhere else.
(function () {
  "use strict";
  var back = document.getElementById("return-link");
  if (back) {
    window.location.replace(back.href);
    return;
  }
  var el = document.getElementById("challenge-result");
  if (!el || window.parent === window) {
    return;
  }
  window.parent.postMessage({
    type: "gatehouse:challenge_done",
    charge: el.getAttribute("data-charge"),
    answer: el.getAttribute("data-answer")
  }, window.location.origin);
})();
