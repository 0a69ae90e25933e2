// `npm test`: every check, in order, on one command. Each step streams its own
// output; the first failure stops the run with a non-zero exit. At the end the
// three runtimes' test counts are compared: the same suite must run the same
// number of tests on Node, Deno and Bun, or a runtime silently skipped a file.
import { spawn } from 'node:child_process';

const steps = [
  ['lint', 'lint'],
  ['typecheck', 'typecheck'],
  ['build', 'build'],
  ['size', 'test:size'],
  ['node', 'test:node'],
  ['deno', 'test:deno'],
  ['bun', 'test:bun'],
  ['browser', 'test:browser'],
  ['package', 'test:pack'],
  ['jsr', 'test:jsr'],
];

// biome-ignore lint/suspicious/noControlCharactersInRegex: stripping ANSI colour codes
const ansi = /\u001b\[[0-9;]*m/g;

/** Reads "passed / failed" from each runner's own closing lines. */
const summaries = {
  node: (out) => ({ passed: last(out, /^# pass (\d+)$/m), failed: last(out, /^# fail (\d+)$/m) }),
  deno: (out) => ({ passed: last(out, /(\d+) passed/), failed: last(out, /(\d+) failed/) }),
  bun: (out) => ({ passed: last(out, /^\s*(\d+) pass$/m), failed: last(out, /^\s*(\d+) fail$/m) }),
};

function last(text, pattern) {
  const all = [...text.matchAll(new RegExp(pattern.source, `${pattern.flags.replace('g', '')}g`))];
  const match = all.at(-1);
  return match ? Number(match[1]) : undefined;
}

function run(script) {
  return new Promise((resolve) => {
    const child = spawn('npm', ['run', '--silent', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1' },
    });
    let output = '';
    child.stdout.on('data', (chunk) => {
      output += chunk;
      process.stdout.write(chunk);
    });
    child.stderr.on('data', (chunk) => {
      output += chunk;
      process.stderr.write(chunk);
    });
    child.on('close', (code) => resolve({ code: code ?? 1, output: output.replace(ansi, '') }));
  });
}

const counts = {};
for (const [label, script] of steps) {
  const started = Date.now();
  process.stdout.write(`\n=== ${label} (npm run ${script}) ===\n`);
  const { code, output } = await run(script);
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  if (summaries[label]) counts[label] = summaries[label](output);
  if (code !== 0) {
    process.stdout.write(`\n=== ${label} FAILED (exit ${code}, ${seconds} s) ===\n`);
    process.exit(code);
  }
  process.stdout.write(`=== ${label} ok (${seconds} s) ===\n`);
}

process.stdout.write('\n=== summary ===\n');
for (const [runtime, { passed, failed }] of Object.entries(counts)) {
  process.stdout.write(`${runtime}: ${passed} passed, ${failed} failed\n`);
}
const passedCounts = new Set(Object.values(counts).map((c) => c.passed));
if (passedCounts.size !== 1 || passedCounts.has(undefined) || passedCounts.has(0)) {
  process.stdout.write('the runtimes ran different numbers of tests (or none): see above\n');
  process.exit(1);
}
const total = Object.values(counts).reduce((n, c) => n + c.passed, 0);
process.stdout.write(`tests: ${total} passed, 0 failed\n`);
