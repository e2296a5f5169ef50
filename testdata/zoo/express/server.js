// A zoo member on a real web framework: the lesson's transfer API in
// express (Debian's node-express), behind an idempotency middleware written
// the way popular Node idempotency libraries are. The transfer itself is
// correct; the middleware has their defects:
//   - the store is keyed by the key text alone (keys shared by all users);
//   - a key is bound to JSON.stringify of the parsed body, so the same
//     request with its members in another order is refused as misuse, and
//     another user's exact body is replayed the first user's answer;
//   - a request without the header is let through (keyless accepted);
//   - only 2xx answers are stored (refused, then moved);
//   - the store is a Map in the process (lost on restart).
// Run: NODE_PATH=/usr/share/nodejs PORT=8080 BANK_FILE=/tmp/bank.json node server.js
'use strict';
const express = require('express');
const crypto = require('crypto');

const tokens = { 'token-ada': 'ada', 'token-bola': 'bola', 'token-chidi': 'chidi' };
const owners = { 1: 'ada', 2: 'bola', 3: 'chidi' };
// The bank is the "database": a file (BANK_FILE) that outlives a restart,
// where the middleware's Map does not.
const fs = require('fs');
const bankFile = process.env.BANK_FILE;
let bank = { balances: { 1: 5000000, 2: 2000000, 3: 500000 }, nextId: 0 };
if (bankFile && fs.existsSync(bankFile)) bank = JSON.parse(fs.readFileSync(bankFile, 'utf8'));
const balances = bank.balances;
function commit() {
  if (bankFile) fs.writeFileSync(bankFile, JSON.stringify(bank));
}

const app = express();
app.use(express.json());

app.use((req, res, next) => {
  req.user = tokens[(req.get('Authorization') || '').replace(/^Bearer /, '')];
  if (!req.user) return res.status(401).json({ error: 'unauthorized' });
  next();
});

// The idempotency middleware.
const store = new Map(); // key text → { fingerprint, done, status, body }
function idempotency(req, res, next) {
  const key = req.get('Idempotency-Key');
  if (!key) return next();
  const fingerprint = crypto.createHash('sha256').update(JSON.stringify(req.body)).digest('hex');
  const seen = store.get(key);
  if (seen) {
    if (seen.fingerprint !== fingerprint) {
      return res.status(422).json({ error: 'IDEMPOTENCY_FINGERPRINT_MISMATCH' });
    }
    if (!seen.done) return res.status(409).json({ error: 'request_in_progress' });
    return res.status(seen.status).json(seen.body);
  }
  const entry = { fingerprint, done: false };
  store.set(key, entry);
  const json = res.json.bind(res);
  res.json = (body) => {
    if (res.statusCode >= 200 && res.statusCode < 300) {
      Object.assign(entry, { done: true, status: res.statusCode, body });
    } else {
      store.delete(key);
    }
    return json(body);
  };
  next();
}

app.post('/transfers', idempotency, (req, res) => {
  const { from, to, amountKobo } = req.body || {};
  if (!Number.isSafeInteger(amountKobo) || amountKobo <= 0) return res.status(400).json({ error: 'invalid_amount' });
  if (owners[from] !== req.user) return res.status(404).json({ error: 'account_not_found' });
  if (!owners[to] || to === from) return res.status(422).json({ error: 'recipient_unavailable' });
  if (balances[from] < amountKobo) return res.status(422).json({ error: 'insufficient_funds' });
  balances[from] -= amountKobo;
  balances[to] += amountKobo;
  bank.nextId += 1;
  commit();
  res.status(201).json({ transferId: bank.nextId, from, to, amountKobo, balanceKobo: balances[from] });
});

app.get('/accounts/:id', (req, res) => {
  if (owners[req.params.id] !== req.user) return res.status(404).json({ error: 'account_not_found' });
  res.json({ id: Number(req.params.id), balanceKobo: balances[req.params.id] });
});

const server = app.listen(Number(process.env.PORT || 8080), '127.0.0.1', () => {
  console.log('listening on ' + server.address().port);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
