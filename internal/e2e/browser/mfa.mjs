// Two-factor sign-in in a real browser (docs/team.md): Debian's chromium
// driven by playwright-core. browser_mfa_test.go starts the stack and runs
// this once; it prints one JSON line with what the journey saw, and leaves a
// screenshot of each page. The TOTP codes are computed here from the key the
// Security page shows, as an authenticator app would (RFC 6238: HMAC-SHA-1,
// 6 digits, 30-second steps). No secret or code is printed.
//
//   node mfa.mjs CONFIG_JSON
//
// CONFIG_JSON: {api, email, password, shots}. The journey: sign in, open
// Security, start the setup (a QR code and the key), confirm with a code,
// see the ten recovery codes, sign out, sign in again with the password and
// a code, land on the dashboard.
import { createHmac } from 'node:crypto';
import { launch, steps } from './harness.mjs';

const cfg = JSON.parse(process.argv[2]);
const out = { steps: {}, pageErrors: [], consoleErrors: [] };
const { step, check, done } = steps(out);

function base32(s) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = 0; let value = 0; const bytes = [];
  for (const ch of s.replace(/=+$/, '').toUpperCase()) {
    const i = alphabet.indexOf(ch);
    if (i < 0) { throw new Error(`not base32: ${ch}`); }
    value = (value << 5) | i; bits += 5;
    if (bits >= 8) { bytes.push((value >>> (bits - 8)) & 0xff); bits -= 8; }
  }
  return Buffer.from(bytes);
}

// totp is the code of secret for a time step (RFC 4226 dynamic truncation).
function totp(secret, stepNumber) {
  const counter = Buffer.alloc(8);
  counter.writeBigUInt64BE(BigInt(stepNumber));
  const mac = createHmac('sha1', base32(secret)).update(counter).digest();
  const offset = mac[mac.length - 1] & 0xf;
  const n = ((mac[offset] & 0x7f) << 24) | (mac[offset + 1] << 16) | (mac[offset + 2] << 8) | mac[offset + 3];
  return String(n % 1000000).padStart(6, '0');
}

const nowStep = () => Math.floor(Date.now() / 1000 / 30);

const browser = await launch();
const shot = (page, name) => page.screenshot({ path: `${cfg.shots}/${name}.png`, fullPage: true });
const context = await browser.newContext({ viewport: { width: 1100, height: 760 } });
const page = await context.newPage();
page.on('pageerror', (e) => out.pageErrors.push(e.message));
page.on('console', (m) => {
  // The wrong code of the journey is answered 401 on purpose.
  if (m.type() === 'error' && !/401/.test(m.text()) && !/favicon\.ico$/.test(m.location().url || '')) {
    out.consoleErrors.push(m.text());
  }
});

async function signInWithPassword() {
  await page.goto(`${cfg.api}/dashboard/login`);
  await page.fill('#email', cfg.email);
  await page.fill('#password', cfg.password);
  await Promise.all([page.waitForLoadState('load'), page.click('#login button[type=submit]')]);
}

try {
  step('sign_in');
  await signInWithPassword();
  await page.waitForURL('**/dashboard/charges');

  step('security');
  await Promise.all([page.waitForURL('**/dashboard/security'), page.click('nav a[href="/dashboard/security"]')]);
  check(await page.locator('#totp-start').count() === 1, 'no button to set up two-factor sign-in');
  await shot(page, 'mfa-security');

  step('setup');
  await Promise.all([page.waitForLoadState('load'), page.click('#totp-start button[type=submit]')]);
  await page.waitForSelector('#totp-secret');
  const secret = (await page.textContent('#totp-secret')).trim();
  check(/^[A-Z2-7]{32}$/.test(secret), 'the key shown is not 20 bytes of base32');
  out.secretShown = true;
  out.qrWidth = await page.$eval('#totp-qr', (img) => (img.complete ? img.naturalWidth : 0));
  await shot(page, 'mfa-setup-qr');

  step('confirm');
  const confirmStep = nowStep();
  await page.fill('#totp-code', totp(secret, confirmStep));
  await Promise.all([page.waitForLoadState('load'), page.click('#totp-confirm button[type=submit]')]);
  await page.waitForSelector('#recovery-codes');
  const codes = await page.$$eval('#recovery-codes code', (els) => els.map((e) => e.textContent.trim()));
  out.recoveryCodes = codes.length;
  out.recoveryCodesWellFormed = codes.every((c) => /^[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4}$/.test(c));
  out.mfaOn = await page.getAttribute('#two-factor', 'data-mfa');
  await shot(page, 'mfa-recovery-codes');
  await page.reload();
  out.codesAfterReload = await page.locator('#recovery-codes').count();

  step('sign_out');
  await Promise.all([page.waitForURL('**/dashboard/login**'), page.click('#sign-out')]);

  step('password');
  await signInWithPassword();
  await page.waitForSelector('#login-mfa');
  out.secondStepShown = true;
  out.cookieAfterPassword = (await context.cookies()).some((c) => c.name === 'gatehouse_session' && c.value !== '');
  await shot(page, 'mfa-login-code');

  step('wrong_code');
  await page.fill('#code', totp(secret, nowStep() + 5));
  await Promise.all([page.waitForLoadState('load'), page.click('#login-mfa button[type=submit]')]);
  out.wrongCodeAlert = (await page.locator('#error').textContent() || '').trim();

  step('code');
  // A code of a step after the one that confirmed the setup: that one is used.
  await page.fill('#code', totp(secret, Math.max(nowStep(), confirmStep + 1)));
  await Promise.all([page.waitForURL('**/dashboard/charges'), page.click('#login-mfa button[type=submit]')]);
  out.landedOn = new URL(page.url()).pathname;
  out.heading = (await page.textContent('h1')).trim();
  await shot(page, 'mfa-signed-in');
  step('done');
} catch (e) {
  out.error = e.message;
  out.failedAt = page.url();
  await shot(page, 'mfa-failure').catch(() => {});
}
done();
await browser.close();
console.log(JSON.stringify(out));
