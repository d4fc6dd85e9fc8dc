// gatehouse.js: the card field for a merchant's checkout page.
//
//   <script src="https://GATEWAY/js/v1/gatehouse.js"></script>
//   var gatehouse = Gatehouse('pk_test_...');
//   gatehouse.mountCard('#card');               // the gateway's own field, framed
//   gatehouse.createToken().then(function (token) {
//     // send token.id to your server, which charges it with the secret key:
//     // POST /v1/charges {"card": {"token": token.id}, ...}
//   });
//
// The card number is typed into the gateway's page (GET /elements/v1/card),
// never into the merchant's. Messages go only to the gateway's origin and
// are accepted only from the framed field.
(function (global) {
  'use strict';
  var script = document.currentScript;
  var gatewayOrigin = script && script.src ? new URL(script.src).origin : '';

  function Gatehouse(publicKey) {
    if (!(this instanceof Gatehouse)) { return new Gatehouse(publicKey); }
    if (typeof publicKey !== 'string' || publicKey.indexOf('pk_') !== 0) {
      throw new Error('Gatehouse: pass your public key (pk_test_...), never a secret key.');
    }
    if (!gatewayOrigin) {
      throw new Error('Gatehouse: load gatehouse.js with a <script src> from the gateway.');
    }
    this._key = publicKey;
    this._frame = null;
    this._ready = false;
    this._waiting = [];
    this._pending = {};
    this._seq = 0;
    var self = this;
    global.addEventListener('message', function (ev) {
      if (ev.origin !== gatewayOrigin || !self._frame || ev.source !== self._frame.contentWindow) { return; }
      var d = ev.data;
      if (!d || d.source !== 'gatehouse-card') { return; }
      if (d.type === 'ready') {
        self._ready = true;
        var waiting = self._waiting;
        self._waiting = [];
        waiting.forEach(function (send) { send(); });
        return;
      }
      var p = self._pending[d.requestId];
      if (!p) { return; }
      delete self._pending[d.requestId];
      if (d.type === 'token') {
        p.resolve(d.token);
        return;
      }
      var e = d.error || {};
      var err = new Error(e.message || 'The card could not be tokenized.');
      err.code = e.code;
      err.param = e.param;
      p.reject(err);
    });
  }

  // mountCard frames the card field into target (an element or a selector)
  // and returns the iframe.
  Gatehouse.prototype.mountCard = function (target) {
    var el = typeof target === 'string' ? document.querySelector(target) : target;
    if (!el) { throw new Error('Gatehouse: mountCard: no element ' + target); }
    var f = document.createElement('iframe');
    f.src = gatewayOrigin + '/elements/v1/card?key=' + encodeURIComponent(this._key) +
      '&origin=' + encodeURIComponent(global.location.origin);
    f.title = 'Secure card payment input';
    f.setAttribute('scrolling', 'no');
    f.style.border = '0';
    f.style.width = '100%';
    f.style.height = '170px';
    el.appendChild(f);
    this._frame = f;
    this._ready = false;
    return f;
  };

  // createToken resolves to the token object of POST /v1/tokens, or rejects
  // with an Error whose code and param are the API's.
  Gatehouse.prototype.createToken = function () {
    var self = this;
    return new Promise(function (resolve, reject) {
      if (!self._frame) {
        reject(new Error('Gatehouse: call mountCard() first.'));
        return;
      }
      var id = String(++self._seq);
      self._pending[id] = { resolve: resolve, reject: reject };
      var send = function () {
        self._frame.contentWindow.postMessage({ target: 'gatehouse-card', type: 'createToken', requestId: id }, gatewayOrigin);
      };
      if (self._ready) { send(); } else { self._waiting.push(send); }
    });
  };

  global.Gatehouse = Gatehouse;
})(window);
