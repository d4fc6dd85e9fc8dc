// The checkout journey in a real browser (Debian's chromium, driven by
// playwright-core): a merchant's page on its own origin mounts Gatehouse's
// card field, the customer types the card into the field, and the merchant's
// server charges the token. Prints one JSON line for browser_test.go:
// {"result", "charge", "cardSentBy": [{frame, url}], "pageErrors", "took_ms"}.
//
//   node checkout.mjs CHECKOUT_URL SCREENSHOT_DIR
import { chromium } from 'playwright-core';

const [checkoutURL, shots] = process.argv.slice(2);
const card = '4242424242424242';
const started = Date.now();
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'],
});
const out = { cardSentBy: [], pageErrors: [] };
try {
  const page = await browser.newPage();
  page.on('pageerror', (e) => out.pageErrors.push(e.message));
  page.on('request', (r) => {
    if ((r.postData() || '').includes(card) || r.url().includes(card)) {
      out.cardSentBy.push({ frame: r.frame() === page.mainFrame() ? 'checkout' : 'card field', url: r.url() });
    }
  });
  await page.goto(checkoutURL);
  const field = page.frameLocator('iframe');
  await field.locator('#number').fill(card);
  await field.locator('#exp').fill('12 / 34');
  await field.locator('#cvc').fill('123');
  await page.screenshot({ path: `${shots}/checkout-filled.png`, fullPage: true });
  await page.click('#submit');
  await page.waitForFunction(() => document.querySelector('#result').dataset.charge || /rror|not|could/.test(document.querySelector('#result').textContent), null, { timeout: 20000 });
  out.result = await page.textContent('#result');
  out.charge = await page.getAttribute('#result', 'data-charge');
  // The merchant's page cannot read the field: the frame is another origin.
  out.pageReadsField = await page.evaluate(() => {
    try { return document.querySelector('iframe').contentDocument !== null; } catch { return false; }
  });
  await page.screenshot({ path: `${shots}/checkout-paid.png`, fullPage: true });
} finally {
  await browser.close();
}
out.took_ms = Date.now() - started;
console.log(JSON.stringify(out));
