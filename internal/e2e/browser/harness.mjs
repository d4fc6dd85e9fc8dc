// What every journey script shares: Debian's chromium, launched the one way
// the tests allow, and the timing and failure messages of named steps.
import { chromium } from 'playwright-core';

// launch starts the browser at $CHROMIUM (Debian's /usr/bin/chromium); no
// browser is ever downloaded.
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
  });
}

// steps times the journey's named steps into out.steps and out.took_ms:
// step(name) ends the current step and starts the next, check(ok, message)
// fails the journey naming the step it is in, done() records the total.
export function steps(out) {
  const started = Date.now();
  let stepStarted = started;
  let current = 'start';
  return {
    step(name) {
      out.steps[current] = Date.now() - stepStarted;
      current = name;
      stepStarted = Date.now();
    },
    check(ok, message) {
      if (!ok) { throw new Error(`${current}: ${message}`); }
    },
    done() { out.took_ms = Date.now() - started; },
  };
}
