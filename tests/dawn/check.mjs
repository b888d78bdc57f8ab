// jaxgru's WGSL on Dawn/Tint (Chrome's WebGPU, npm `webgpu`): reads the JSON that
// tests/test_dawn.py records on wgpu and
//   1. on Dawn's `null` backend, compiles every shader module and creates every compute pipeline
//      (its override constants, an explicit layout from the binding table): any compilation
//      message, validation or internal error fails, naming the specialisation;
//   2. on Dawn's OpenGL ES backend (llvmpipe with EGL_PLATFORM=surfaceless, compatibility
//      feature level), replays each recorded call (same buffers, uploads, bind groups, dynamic
//      offsets, grids and copies) and compares the read-back bytes with wgpu's.
// Last line: `DAWN-SUMMARY {"modules", "pipelines", "configurations", "identical", ...}`.
// Exit status: 0 all passed, 1 a failure, 2 bad usage or no Dawn adapter,
// 3 everything compiled but there is no OpenGL ES adapter (replays not run).
//
// usage: node tests/dawn/check.mjs RECORDING.json [--compile-only]   (DAWN_CHECK_DEBUG=1: progress
// on stderr, e.g. to find where dawn.node crashed)
import { readFileSync } from 'node:fs';
import { create, globals } from 'webgpu';

Object.assign(globalThis, globals);
process.env.EGL_PLATFORM ??= 'surfaceless'; // Mesa's EGL without a display (read at adapter discovery)

const MAX_REPORTED = 20;
const args = process.argv.slice(2);
if (args.length < 1 || args.length > 2 || (args[1] && args[1] !== '--compile-only')) {
  console.error('usage: node tests/dawn/check.mjs RECORDING.json [--compile-only]');
  process.exit(2);
}
const rec = JSON.parse(readFileSync(args[0], 'utf8'));
const failures = [];
const summary = { modules: 0, pipelines: 0, configurations: 0, identical: 0 };

const debug = process.env.DAWN_CHECK_DEBUG ? (...a) => console.error('[debug]', ...a) : () => {};

function fail(what, message) {
  failures.push(`${what}: ${message}`);
}

function finish(status) {
  for (const f of failures.slice(0, MAX_REPORTED)) console.log(`FAIL ${f}`);
  if (failures.length > MAX_REPORTED) console.log(`... and ${failures.length - MAX_REPORTED} more failures`);
  summary.failures = failures.length;
  console.log(`DAWN-SUMMARY ${JSON.stringify(summary)}`);
  process.exit(failures.length ? 1 : status); // exit at once: a live Dawn instance keeps node running
}

const camel = (name) => name.replace(/-(\w)/g, (_, c) => c.toUpperCase());

// The device, with the adapter's maxima of the limits jaxgru requests (and `extra` limits).
async function open(backend, options, features, extra = []) {
  debug('open', backend);
  const gpu = create([`backend=${backend}`]); // kept referenced: Dawn crashes if it is collected
  const adapter = await gpu.requestAdapter(options);
  if (!adapter) return null;
  const requiredLimits = {};
  for (const name of [...rec.requested_limits.map(camel), ...extra]) {
    if (name in adapter.limits) requiredLimits[name] = adapter.limits[name];
  }
  const requiredFeatures = features.filter((f) => adapter.features.has(f));
  const device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
  device.addEventListener('uncapturederror', (e) => fail(`${backend} uncaptured error`, e.error.message));
  const info = adapter.info;
  return { gpu, device, adapter, name: `${info.vendor} ${info.architecture} ${info.device} ${info.description}`.trim() };
}

// Bind-group and pipeline layouts of each family, from shaders.BINDINGS.
function layouts(device) {
  const out = {};
  for (const [family, table] of Object.entries(rec.bindings)) {
    const entries = Object.entries(table).map(([binding, kind]) => ({
      binding: Number(binding),
      visibility: GPUShaderStage.COMPUTE,
      buffer: { type: kind === 'uniform-dynamic' ? 'uniform' : kind, hasDynamicOffset: kind === 'uniform-dynamic' },
    }));
    const group = device.createBindGroupLayout({ label: family, entries });
    out[family] = { group, pipeline: device.createPipelineLayout({ label: family, bindGroupLayouts: [group] }) };
  }
  return out;
}

const moduleName = (m) => `${m.kernel}.wgsl (${m.storage})`;
const pipelineName = (p) => {
  const consts = Object.entries(p.constants).map(([k, v]) => `${k}=${v}`).join(' ');
  return `pipeline #${p.index} ${p.kernel}:${p.entry} ${p.storage} {${consts}} [from ${p.cases.join(', ')}]`;
};

// Run `fn` inside validation and internal error scopes; a thrown or scoped error fails `what`.
async function scoped(device, what, fn) {
  device.pushErrorScope('validation');
  device.pushErrorScope('internal');
  let result = null;
  try {
    result = fn();
  } catch (e) {
    fail(what, `threw ${e.message}`);
  }
  for (const scope of ['internal', 'validation']) {
    const error = await device.popErrorScope();
    if (error) fail(what, `${scope} error: ${error.message}`);
  }
  return result;
}

// A shader module; null when it failed (every compilation message counts as a failure).
async function compileModule(device, m) {
  debug('module', moduleName(m));
  const before = failures.length;
  const mod = await scoped(device, moduleName(m), () => device.createShaderModule({ label: moduleName(m), code: m.source }));
  if (mod) {
    for (const msg of (await mod.getCompilationInfo()).messages) {
      fail(moduleName(m), `${msg.type} at line ${msg.lineNum}:${msg.linePos}: ${msg.message}`);
    }
  }
  return failures.length === before ? mod : null;
}

// A compute pipeline of specialisation `p`; null when it failed.
async function createPipeline(device, module, lay, p) {
  debug(pipelineName(p));
  const before = failures.length;
  const pipe = await scoped(device, pipelineName(p), () => device.createComputePipeline({
    label: `${p.kernel}:${p.entry}#${p.index}`,
    layout: lay[rec.modules[p.module].family].pipeline,
    compute: { module, entryPoint: p.entry, constants: p.constants },
  }));
  return failures.length === before ? pipe : null;
}

// ---- 1. every module and pipeline on the null backend -------------------------------------
const nul = await open('null', {}, ['shader-f16', 'subgroups']);
if (!nul) {
  console.error("Dawn's null backend gave no adapter");
  process.exit(2);
}
{
  const { device } = nul;
  const lay = layouts(device);
  const mods = [];
  for (const m of rec.modules) {
    mods.push(await compileModule(device, m));
    if (mods.at(-1)) summary.modules++;
  }
  for (const p of rec.pipelines) {
    if (mods[p.module] && (await createPipeline(device, mods[p.module], lay, p))) summary.pipelines++;
  }
  summary.null_adapter = nul.name;
}
if (args[1] === '--compile-only' || failures.length) finish(0);

// ---- 2. the recorded calls on OpenGL ES, bytes compared -------------------------------------
const gles = await open('opengles', { featureLevel: 'compatibility' }, [], ['minUniformBufferOffsetAlignment']);
if (!gles) {
  console.log('no OpenGL ES adapter (Dawn needs libEGL.so and Mesa: apt-get install libegl-dev libegl-mesa0 libgl1-mesa-dri)');
  finish(3);
}
summary.gles_adapter = gles.name;

const bytes = (b64) => new Uint8Array(Buffer.from(b64, 'base64'));

function compare(what, got, want) {
  if (got.length !== want.length) {
    fail(what, `read ${got.length} bytes, wgpu read ${want.length}`);
    return false;
  }
  let differ = 0;
  for (let i = 0; i < got.length; i++) if (got[i] !== want[i]) differ++;
  if (!differ) return true;
  // the outputs of float32 calls are float32: say by how much they differ
  const g = new Float32Array(got.buffer, got.byteOffset, got.length >> 2);
  const w = new Float32Array(want.buffer, want.byteOffset, want.length >> 2);
  let maxAbs = 0, at = -1, values = 0;
  for (let i = 0; i < g.length; i++) {
    if (Object.is(g[i], w[i])) continue;
    values++;
    const d = Math.abs(g[i] - w[i]);
    if (!(d <= maxAbs)) { maxAbs = d; at = i; }
  }
  fail(what, `${differ} bytes differ (${values} of ${g.length} float32 values; max |Dawn - wgpu| = ${maxAbs} ` +
    `at float ${at}: ${g[at]} vs ${w[at]})`);
  return false;
}

// One recorded call, event by event; true when every read-back matches wgpu's bytes.
async function replay(device, lay, r) {
  const what = `replay ${r.name}`;
  const buffers = [], groups = [], pipelines = new Map();
  let encoder = null, pass = null, ok = true;
  const pipeline = async (index) => {
    if (!pipelines.has(index)) {
      const p = rec.pipelines[index];
      const mod = await glesModule(device, p.module);
      pipelines.set(index, mod && (await createPipeline(device, mod, lay, p)));
    }
    return pipelines.get(index);
  };
  device.pushErrorScope('validation');
  try {
    for (const e of r.events) {
      switch (e.op) {
        case 'buffer': buffers[e.id] = device.createBuffer({ size: e.size, usage: e.usage }); break;
        case 'write': device.queue.writeBuffer(buffers[e.buffer], e.offset, bytes(e.data)); break;
        case 'bind_group':
          groups[e.id] = device.createBindGroup({
            layout: lay[e.family].group,
            entries: e.entries.map(([binding, buf, offset, size]) => ({ binding, resource: { buffer: buffers[buf], offset, size } })),
          });
          break;
        case 'encoder': encoder = device.createCommandEncoder(); break;
        case 'pass': pass = encoder.beginComputePass(); break;
        case 'set_pipeline': {
          const pipe = await pipeline(e.pipeline);
          if (!pipe) throw new Error(`pipeline #${e.pipeline} failed`);
          pass.setPipeline(pipe);
          break;
        }
        case 'set_bind_group': pass.setBindGroup(e.index, groups[e.group], e.offsets); break;
        case 'dispatch': pass.dispatchWorkgroups(...e.grid); break;
        case 'end': pass.end(); break;
        case 'copy': encoder.copyBufferToBuffer(buffers[e.src], e.src_offset, buffers[e.dst], e.dst_offset, e.size); break;
        case 'submit': device.queue.submit(e.count ? [encoder.finish()] : []); break;
        case 'read': {
          const buf = buffers[e.buffer];
          await buf.mapAsync(GPUMapMode.READ, e.offset, e.size);
          const got = new Uint8Array(buf.getMappedRange(e.offset, e.size).slice(0));
          buf.unmap();
          ok = compare(`${what} (read-back buffer ${e.buffer})`, got, bytes(e.data)) && ok;
          break;
        }
        default: throw new Error(`unknown event ${e.op}`);
      }
    }
  } catch (e) {
    fail(what, `threw ${e.message}`);
    ok = false;
  }
  const error = await device.popErrorScope();
  if (error) {
    fail(what, `validation error: ${error.message}`);
    ok = false;
  }
  for (const b of buffers) b?.destroy();
  return ok;
}

const glesModules = new Map();
async function glesModule(device, index) {
  if (!glesModules.has(index)) glesModules.set(index, await compileModule(device, rec.modules[index]));
  return glesModules.get(index);
}

{
  const { device } = gles;
  const lay = layouts(device);
  for (const r of rec.replays) {
    summary.configurations++;
    if (await replay(device, lay, r)) summary.identical++;
  }
}
finish(0);
