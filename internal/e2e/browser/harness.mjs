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

// dashboardPage opens a page of a new context (1360x860). Its page errors
// and console errors go to out.pageErrors and out.consoleErrors, but for a
// missing favicon and for the one error the journey is about to cause on
// purpose: expectError(re) lets the next console error that matches re
// pass, once. shot(page, name) saves a full-page screenshot as
// <shots>/<name>.png. failed(e, name) records a journey's error.
export async function dashboardPage(browser, out, shots) {
  const context = await browser.newContext({ viewport: { width: 1360, height: 860 } });
  const page = await context.newPage();
  let expected = null;
  page.on('pageerror', (e) => out.pageErrors.push(e.message));
  page.on('console', (m) => {
    if (m.type() !== 'error') { return; }
    if (expected && expected.test(m.text())) { expected = null; return; }
    if (!/favicon\.ico$/.test(m.location().url || '')) { out.consoleErrors.push(m.text()); }
  });
  const shot = (p, name) => p.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
  return {
    page,
    shot,
    expectError: (re) => { expected = re; },
    // failed records where the journey stopped: the error, the page, its
    // alerts, and a screenshot <name>-failure.
    failed: async (e, name) => {
      out.error = String(e && e.stack || e);
      out.failedAt = page.url();
      out.failedAlert = await page.locator('[role=alert]').allTextContents().catch(() => []);
      await shot(page, `${name}-failure`).catch(() => {});
    },
  };
}
