#!/usr/bin/env node
// Build a JavaScript policy into a Verdict component.
//
//   verdict-build-js --wit <dir-or-file> [--world policy] --entry <file> --out <component.wasm>
//                    [--project <dir>] [--bundle-out <file>]
//
// ComponentizeJS takes one self-contained module: it resolves relative imports only when
// given a source path, and never bare package imports such as `@verdict/sdk`. So the entry
// is first bundled with esbuild into one ES module, led by a module that imports the host
// interface and hands it to the SDK (which never imports it itself, so the same code runs
// natively in tests). The engine's HTTP features are disabled; its clocks, randomness and
// stdio stay, importing the WASI 0.2 interfaces that Verdict's host serves deterministically:
// `Date.now()` reads the failure's `now-ms`, `Math.random()` is seeded by the failure's jitter
// seed, and `console.log` writes to the policy log. So code that reaches for them still gives
// the same verdict for the same failure.
//
// esbuild and @bytecodealliance/componentize-js are the policy project's devDependencies,
// resolved from the project directory (default: the current directory).

import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const TESTED = { esbuild: '0.28.2', '@bytecodealliance/componentize-js': '0.23.0' };
const FEATURES = ['http', 'fetch-event'];
const SDK_HOST = fileURLToPath(new URL('../src/host.js', import.meta.url));
const USAGE =
  'usage: verdict-build-js --wit <dir-or-file> [--world policy] --entry <file> --out <component.wasm> ' +
  '[--project <dir>] [--bundle-out <file>]';

class BuildError extends Error {}

function parseArgs(argv) {
  const known = new Set(['--wit', '--world', '--entry', '--out', '--project', '--bundle-out']);
  const args = { '--world': 'policy', '--project': '.' };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--help' || flag === '-h') {
      console.log(USAGE);
      process.exit(0);
    }
    if (!known.has(flag)) throw new BuildError(`unknown argument \`${flag}\`\n${USAGE}`);
    if (i + 1 >= argv.length) throw new BuildError(`${flag} needs a value\n${USAGE}`);
    args[flag] = argv[++i];
  }
  for (const required of ['--wit', '--entry', '--out']) {
    if (!args[required]) throw new BuildError(`${required} is required\n${USAGE}`);
  }
  return {
    wit: resolve(args['--wit']),
    world: args['--world'],
    entry: resolve(args['--entry']),
    out: resolve(args['--out']),
    project: resolve(args['--project']),
    bundleOut: args['--bundle-out'] && resolve(args['--bundle-out']),
  };
}

/** The host interface's import specifier, versioned as the WIT package is (`...@0.2.0`). */
function hostSpecifier(witPath) {
  if (!existsSync(witPath)) throw new BuildError(`--wit ${witPath} does not exist`);
  const files = statSync(witPath).isDirectory()
    ? readdirSync(witPath).filter((f) => f.endsWith('.wit')).map((f) => join(witPath, f))
    : [witPath];
  for (const file of files) {
    const m = /^\s*package\s+verdict:policy(@[^\s;]+)?\s*;/m.exec(readFileSync(file, 'utf8'));
    if (m) return `verdict:policy/host${m[1] ?? ''}`;
  }
  throw new BuildError(`no \`package verdict:policy...;\` in ${files.length ? files.join(', ') : `${witPath} (no .wit files)`}`);
}

/** Import a package installed in the project (or a directory above it). */
async function load(name, project) {
  for (let dir = project; ; dir = dirname(dir)) {
    const root = join(dir, 'node_modules', name);
    if (existsSync(join(root, 'package.json'))) {
      const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
      return { module: await import(pathToFileURL(join(root, entryOf(pkg))).href), version: pkg.version };
    }
    if (dirname(dir) === dir) break;
  }
  throw new BuildError(
    `${name} is not installed in ${project}; the build needs it as a devDependency:\n` +
      `  npm install --save-dev --save-exact ${name}@${TESTED[name]}`,
  );
}

function entryOf(pkg) {
  let target = pkg.exports;
  if (target && typeof target === 'object' && '.' in target) target = target['.'];
  while (target && typeof target === 'object') target = target.import ?? target.default ?? target.node;
  return target ?? pkg.main ?? 'index.js';
}

async function bundle(esbuild, { entry, project, specifier }) {
  if (!existsSync(entry)) throw new BuildError(`--entry ${entry} does not exist`);
  const bindHost = {
    name: 'verdict-bind-host',
    setup(build) {
      build.onResolve({ filter: /^verdict-sdk:bind-host$/ }, (a) => ({ path: a.path, namespace: 'verdict' }));
      build.onLoad({ filter: /.*/, namespace: 'verdict' }, () => ({
        contents: `import * as host from ${JSON.stringify(specifier)};\n` +
          `import { bindHost } from ${JSON.stringify(SDK_HOST)};\n` +
          'bindHost(host);\n',
        resolveDir: dirname(SDK_HOST),
        loader: 'js',
      }));
    },
  };
  let result;
  try {
    result = await esbuild.build({
      stdin: {
        // The host binding is imported first so it runs before any of the policy's modules.
        contents: `import 'verdict-sdk:bind-host';\nexport { decider } from ${JSON.stringify(entry)};\n`,
        resolveDir: project,
        sourcefile: 'verdict-component.js',
        loader: 'js',
      },
      bundle: true,
      format: 'esm',
      platform: 'neutral',
      mainFields: ['module', 'main'],
      target: 'es2022',
      external: ['verdict:*'],
      plugins: [bindHost],
      metafile: true,
      write: false,
      logLevel: 'silent',
      legalComments: 'none',
    });
  } catch (e) {
    throw new BuildError(explainBundleErrors(e, entry, project));
  }
  // metafile paths are relative to the working directory.
  const hosts = Object.keys(result.metafile.inputs).filter((p) => p.endsWith('src/host.js') && isSdk(resolve(p)));
  if (hosts.length > 1) {
    throw new BuildError(
      `the bundle holds two copies of @verdict/sdk (${hosts.join(', ')}); the host is bound to one only. ` +
        'Import the SDK as `@verdict/sdk` everywhere and install one copy.',
    );
  }
  return result.outputFiles[0].text;
}

function isSdk(hostJs) {
  const pkg = join(dirname(dirname(hostJs)), 'package.json');
  return existsSync(pkg) && JSON.parse(readFileSync(pkg, 'utf8')).name === '@verdict/sdk';
}

function explainBundleErrors(e, entry, project) {
  const lines = (e.errors ?? []).map((m) => {
    const at = m.location ? `${relative(project, m.location.file) || m.location.file}:${m.location.line}:${m.location.column}: ` : '';
    let hint = '';
    if (/No matching export .* for import "decider"/.test(m.text)) {
      hint = `\n  ${basename(entry)} must export the policy: \`export const decider = exportPolicy(MyPolicy, {name, version, description});\``;
    } else if (/Could not resolve "node:|Could not resolve "(fs|path|os|crypto|child_process)"/.test(m.text)) {
      hint = '\n  a policy runs inside a sandboxed component, without Node.js APIs';
    } else if (/Could not resolve "@verdict\/sdk"/.test(m.text)) {
      hint = '\n  install the SDK in the project: "@verdict/sdk": "file:<path to guest-sdk/js>" in dependencies, then npm install';
    }
    return `  ${at}${m.text}${hint}`;
  });
  return `bundling ${entry} failed:\n${lines.length ? lines.join('\n') : `  ${e.message}`}`;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const started = Date.now();
  const specifier = hostSpecifier(opts.wit);
  const esbuild = await load('esbuild', opts.project);
  const cjs = await load('@bytecodealliance/componentize-js', opts.project);

  const source = await bundle(esbuild.module, { ...opts, specifier });
  if (opts.bundleOut) {
    await mkdir(dirname(opts.bundleOut), { recursive: true });
    await writeFile(opts.bundleOut, source);
  }

  let built;
  try {
    built = await cjs.module.componentize(source, {
      sourceName: basename(opts.entry),
      witPath: opts.wit,
      worldName: opts.world,
      disableFeatures: FEATURES,
    });
  } catch (e) {
    throw new BuildError(
      `componentize-js could not build ${opts.entry}:\n${String(e.message ?? e).trim()}\n` +
        '  (module top-level code runs at build time, where the host, clocks and randomness are unavailable)',
    );
  }
  const imports = [...new Set(built.imports.map(([specifierOf]) => specifierOf))];
  const foreign = imports.filter((s) => !s.startsWith('verdict:policy/'));
  if (foreign.length) {
    throw new BuildError(`the component would import ${foreign.join(', ')}; a policy may import only verdict:policy/host`);
  }

  await mkdir(dirname(opts.out), { recursive: true });
  await writeFile(opts.out, built.component);
  const mib = (built.component.length / (1024 * 1024)).toFixed(1);
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(
    `built ${relative(process.cwd(), opts.out) || opts.out} (${mib} MiB) in ${seconds}s with ` +
      `componentize-js ${cjs.version}, esbuild ${esbuild.version}; imports: ${imports.join(', ') || 'nothing'}`,
  );
}

main().catch((e) => {
  if (e instanceof BuildError) {
    console.error(`verdict-build-js: error: ${e.message}`);
    process.exit(1);
  }
  console.error(e);
  process.exit(1);
});
