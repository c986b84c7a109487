// File operations over exec against the local control plane: binary-exact
// round trips, atomic writes, error codes, awkward names, and a 200 MiB
// round trip with bounded memory.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { skip } from "./cluster.mjs";
import { allBytes, openSandbox, scratchDir, sh } from "./sandbox-fixture.mjs";

describe("files", { skip, timeout: 600_000 }, () => {
  /** @type {Awaited<ReturnType<typeof openSandbox>>} */
  let box;
  let sandbox;
  let dir;
  before(async () => {
    box = await openSandbox("files");
    sandbox = box.sandbox;
    dir = await scratchDir(sandbox, "files");
  });
  after(async () => box?.close());

  test("every byte value round-trips through writeFile and readFile", async () => {
    const bytes = allBytes();
    await sandbox.writeFile(`${dir}/bytes.bin`, bytes);
    const back = await sandbox.readFile(`${dir}/bytes.bin`);
    assert.ok(back instanceof Uint8Array);
    assert.deepEqual(new Uint8Array(back), bytes);
    // What the pod sees is the same bytes, not an encoding of them.
    assert.equal((await sh(sandbox, `od -An -v -tx1 bytes.bin | tr -d ' \\n'`, { cwd: dir })), Buffer.from(bytes).toString("hex"));
  });

  test("readFile in 1 MiB pages gives back a random binary file; a range deep into a sparse file", async () => {
    const data = randomBytes(5 * 1024 * 1024 + 12_345);
    await sandbox.writeFile(`${dir}/pages.bin`, data);
    const page = 1024 * 1024;
    const pages = [];
    for (let offset = 0; ; offset += page) {
      const chunk = await sandbox.readFile(`${dir}/pages.bin`, { offset, length: page, maxBytes: page });
      if (chunk.length === 0) break;
      pages.push(chunk);
    }
    const sha = (b) => createHash("sha256").update(b).digest("hex");
    assert.equal(sha(Buffer.concat(pages)), sha(data));
    assert.equal((await sandbox.readFile(`${dir}/pages.bin`, { offset: data.length })).length, 0, "at the end: empty");
    assert.equal((await sandbox.readFile(`${dir}/pages.bin`, { offset: 2 ** 53 - 1, length: 1 })).length, 0, "far past the end: empty");
    const last = await sandbox.readFile(`${dir}/pages.bin`, { offset: data.length - 10, length: page });
    assert.deepEqual(Buffer.from(last), data.subarray(data.length - 10), "shorter at the end");
    // Sparse files of 10 GiB and 1 TiB with a marker deep inside: the range is
    // a seek away (read.sh), not a read of the gigabytes before it.
    for (const [size, at] of [["10G", 9 * 2 ** 30], ["1T", 2 ** 40 - 8192]]) {
      await sh(sandbox, `truncate -s ${size} sparse && printf needle | dd of=sparse bs=1 seek=${at} conv=notrunc 2>/dev/null`, { cwd: dir });
      const t0 = performance.now();
      const page = await sandbox.readFile(`${dir}/sparse`, { offset: at, length: 4096, maxBytes: 4096 });
      console.log(`4 KiB at byte ${at} of a sparse ${size} file: ${(performance.now() - t0).toFixed(0)} ms`);
      assert.equal(Buffer.from(page.subarray(0, 6)).toString(), "needle");
      assert.deepEqual(page.subarray(6), new Uint8Array(4090), "zeros after the marker");
      assert.equal(page.length, 4096);
      const end = await sandbox.readFile(`${dir}/sparse`, { offset: at + 4, length: 4096 });
      assert.equal(Buffer.from(end.subarray(0, 2)).toString(), "le", "a range starting inside the marker");
    }
    await sandbox.remove(`${dir}/sparse`);
  });

  test("writeFile takes strings as UTF-8, creates and truncates", async () => {
    const path = `${dir}/text.txt`;
    await sandbox.writeFile(path, "a longer first version ✓\n");
    await sandbox.writeFile(path, "short ü");
    assert.equal(Buffer.from(await sandbox.readFile(path)).toString(), "short ü");
    await sandbox.writeFile(path, "");
    assert.equal((await sandbox.readFile(path)).length, 0);
  });

  test("writeFile replaces atomically, keeps the file's mode and writes through symlinks", async () => {
    const path = `${dir}/script.sh`;
    await sandbox.writeFile(path, "#!/bin/sh\necho one\n");
    await sh(sandbox, `chmod 755 script.sh && ln -s script.sh link.sh`, { cwd: dir });
    await sandbox.writeFile(`${dir}/link.sh`, "#!/bin/sh\necho two\n");
    assert.equal(await sh(sandbox, "./script.sh", { cwd: dir }), "two\n");
    assert.equal((await sandbox.stat(`${dir}/link.sh`)).isSymbolicLink, true);
    // No temp files are left behind.
    assert.deepEqual((await sandbox.readdir(dir)).filter((n) => n.includes(".tmp")), []);
  });

  test("readFile errors: not_found, is_directory, too_large", async () => {
    await assert.rejects(sandbox.readFile(`${dir}/missing`), { code: "not_found" });
    await assert.rejects(sandbox.readFile(dir), { code: "is_directory" });
    await sandbox.writeFile(`${dir}/ten.txt`, "0123456789");
    await assert.rejects(sandbox.readFile(`${dir}/ten.txt`, { maxBytes: 9 }), { code: "too_large" });
    assert.equal((await sandbox.readFile(`${dir}/ten.txt`, { maxBytes: 10 })).length, 10);
    // A file that grows past the limit while being read (no size up front).
    await assert.rejects(sandbox.readFile("/dev/zero", { maxBytes: 1 << 20 }), { code: "invalid_request" });
  });

  test("names up to Linux's 255 bytes work; longer ones are invalid_request with a short message, before any exec", async () => {
    const name = "n".repeat(255);
    await sandbox.writeFile(`${dir}/${name}`, "fits");
    assert.equal(Buffer.from(await sandbox.readFile(`${dir}/${name}`)).toString(), "fits");
    await sandbox.mkdir(`${dir}/${"d".repeat(255)}/${"e".repeat(255)}`);
    const tooLong = [`${dir}/${"x".repeat(5000)}`, `${dir}/${name}n`, `${dir}/${"a/".repeat(2100)}f`];
    const calls = ["readFile", "stat", "exists", "mkdir", "readdir", "remove"].map((op) => (p) => sandbox[op](p));
    calls.push((p) => sandbox.writeFile(p, "x"));
    for (const path of tooLong) {
      for (const call of calls) {
        const err = await call(path).then(() => assert.fail(`accepted a ${path.length}-byte path`), (e) => e);
        assert.equal(err.code, "invalid_request", err.message);
        assert.ok(err.message.length < 400, `${err.message.length} chars: ${err.message.slice(0, 200)}`);
        assert.match(err.message, /Linux/);
      }
    }
  });

  test("writeFile errors: missing parent is not_found, a directory is is_directory", async () => {
    await assert.rejects(sandbox.writeFile(`${dir}/no/such/dir/f`, "x"), { code: "not_found" });
    await assert.rejects(sandbox.writeFile(dir, "x"), { code: "is_directory" });
  });

  test("mkdir is recursive and idempotent; over a file it fails", async () => {
    await sandbox.mkdir(`${dir}/a/b/c`);
    await sandbox.mkdir(`${dir}/a/b/c`);
    assert.equal((await sandbox.stat(`${dir}/a/b/c`)).isDirectory, true);
    await sandbox.writeFile(`${dir}/plain`, "x");
    await assert.rejects(sandbox.mkdir(`${dir}/plain`), { code: "invalid_request" });
  });

  test("stat: file, directory and symlink fields", async () => {
    await sandbox.writeFile(`${dir}/stat.txt`, "12345");
    await sh(sandbox, "chmod 640 stat.txt && touch -d @1700000000 stat.txt && ln -sf stat.txt stat-link", { cwd: dir });
    const f = await sandbox.stat(`${dir}/stat.txt`);
    assert.deepEqual(f, {
      isDirectory: false,
      isFile: true,
      isSymbolicLink: false,
      size: 5,
      mtimeMs: 1_700_000_000_000,
      mode: 0o100640,
      type: "file",
    });
    const l = await sandbox.stat(`${dir}/stat-link`);
    assert.deepEqual([l.isSymbolicLink, l.isFile, l.size], [true, true, 5]);
    const d = await sandbox.stat(dir);
    assert.deepEqual([d.isDirectory, d.isFile, d.type], [true, false, "directory"]);
    await assert.rejects(sandbox.stat(`${dir}/missing`), { code: "not_found" });
  });

  test("readdir keeps awkward names intact; readdirBytes keeps non-UTF-8 names exact", async () => {
    const sub = `${dir}/names`;
    await sandbox.mkdir(sub);
    const names = ["with space", "it's", 'dq"uote', "-rf", "--", "new\nline", ".hidden", "ü日本", "*", "$(x)"];
    for (const n of names) await sandbox.writeFile(`${sub}/${n}`, n);
    await sh(sandbox, "printf x > \"$(printf 'bad\\377name')\"", { cwd: sub });
    const got = await sandbox.readdir(sub);
    assert.deepEqual([...got].sort(), [...names, "bad\ufffdname"].sort());
    const raw = (await sandbox.readdirBytes(sub)).map((b) => Buffer.from(b).toString("latin1"));
    assert.ok(raw.includes("bad\xffname"));
    assert.deepEqual(await sandbox.readdir(await scratchDir(sandbox, "empty")), []);
    await assert.rejects(sandbox.readdir(`${dir}/missing`), { code: "not_found" });
    await assert.rejects(sandbox.readdir(`${sub}/it's`), { code: "invalid_request" });
  });

  test("paths starting with '-' are never options", async () => {
    await sandbox.writeFile(`${dir}/-n`, "dash");
    assert.equal(Buffer.from(await sandbox.readFile(`${dir}/-n`)).toString(), "dash");
    // Relative paths resolve against the sandbox cwd.
    const rel = `${dir.slice(sandbox.cwd.length + 1)}/-n`;
    assert.equal(Buffer.from(await sandbox.readFile(rel)).toString(), "dash");
    assert.equal(await sandbox.exists(rel), true);
    await sandbox.remove(rel);
    assert.equal(await sandbox.exists(`${dir}/-n`), false);
  });

  test("exists never throws for a missing path", async () => {
    assert.equal(await sandbox.exists(dir), true);
    assert.equal(await sandbox.exists(`${dir}/missing`), false);
    assert.equal(await sandbox.exists(`${dir}/missing/deeper`), false);
  });

  test("remove follows fs.rm: force and recursive", async () => {
    await sandbox.mkdir(`${dir}/tree/sub`);
    await sandbox.writeFile(`${dir}/tree/sub/f`, "x");
    await assert.rejects(sandbox.remove(`${dir}/tree`), { code: "is_directory" });
    await sandbox.remove(`${dir}/tree`, { recursive: true });
    assert.equal(await sandbox.exists(`${dir}/tree`), false);
    await assert.rejects(sandbox.remove(`${dir}/tree`), { code: "not_found" });
    await sandbox.remove(`${dir}/tree`, { force: true });
  });

  test("a 200 MiB file round-trips with bounded memory", async () => {
    const size = 200 * 1024 * 1024;
    const content = randomBytes(size);
    const digest = createHash("sha256").update(content).digest("hex");
    const baseline = process.memoryUsage().rss;
    let peak = baseline;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
    try {
      await sandbox.writeFile(`${dir}/big.bin`, content);
      assert.equal(await sh(sandbox, "sha256sum big.bin | cut -d' ' -f1", { cwd: dir }), `${digest}\n`);
      const back = await sandbox.readFile(`${dir}/big.bin`, { maxBytes: size });
      assert.equal(back.length, size);
      assert.equal(createHash("sha256").update(back).digest("hex"), digest);
    } finally {
      clearInterval(sampler);
    }
    // The read result itself is 200 MiB; streaming must not add copies of it.
    assert.ok(peak - baseline < size + 128 * 1024 * 1024, `RSS grew by ${((peak - baseline) / 2 ** 20).toFixed(0)} MiB`);
  });
});

describe("files after the sandbox is gone", { skip, timeout: 300_000 }, () => {
  test("exists throws (it only answers false for a missing path)", async () => {
    const box = await openSandbox("files-gone");
    await box.close();
    await assert.rejects(box.sandbox.exists("/tmp"), (e) => typeof e.code === "string");
  });
});
