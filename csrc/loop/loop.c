/* loop.c — the training step loop, a Lua C module (luaopen_crescent_loop).
 *
 * C owns the loop over epochs, phases (train, and test every N epochs,
 * interleaved VISSL-style) and steps; Lua owns the work of a step (task.train_step,
 * task.eval_step) and the hooks. C calls Lua only through the Lua C API (lua_pcall) from
 * this lua_CFunction, never through FFI callbacks (LuaJIT refuses a callback made inside
 * a C call from a compiled trace).
 *
 * Per step the loop allocates nothing on the Lua heap: hook methods are resolved once
 * (registry references, sorted by lua/crescent/engine/trainer.lua), timings accumulate
 * in C doubles and are written into the task's existing `timing` table as numbers, and
 * an incremental GC step runs every iteration so the cdata handles of the step's tensors
 * are finalised steadily instead of in one long pause.
 *
 * Preemption (handlers in signals.c). With opts.handle_signals, loop.run installs
 * handlers for SIGTERM, SIGINT and SIGUSR1 that only record the signal, and puts the
 * previous handlers back on every way out (end, error, stop). The loop looks at the record
 * after each step (train and test, before the after_step hooks), after before_train and
 * after each phase. A signal there sets task.stop_requested = true, task.stop_reason =
 * 'signal', task.signal = 'SIGTERM' | 'SIGINT' | 'SIGUSR1', prints one line on stderr, and
 * then: the after_step hooks run as usual (a checkpoint hook sees task.signal and saves),
 * no further step runs, the test phase that follows an early stop is skipped, after_train
 * hooks run, and task.epoch stays at the interrupted epoch unless its train phase had
 * consumed all its batches (a resume redoes the rest of that epoch). A hook may also set
 * task.signal (with stop_requested) for a signal another process received: a distributed
 * run's ranks stop together (dist/setup.lua), and the loop stops as for its own. A second SIGINT
 * while the first is being handled exits at once with status 130, without a checkpoint.
 *
 * Resume: the first epoch is task.epoch as left by the before_train hooks (one may
 * restore a checkpoint), and a phase's step counter starts at task.phase_iteration as
 * left by task:_begin_phase (the resumed batch index of a resumed train phase).
 *
 * Stepping by hand: the run's stage (before_train, an epoch's train phase, its
 * test phase, after_train), epoch and a paused phase's iterator live in the ctx, so
 * loop.step can run n train steps or one phase and return, and the next loop.step or
 * loop.run goes on from there with the same hooks in the same order. While a run is
 * driven by hand a SIGINT pauses it at the next step boundary instead of stopping it.
 * Attaching: with opts.attach, a SIGUSR2 calls task:_attach() after the current step's
 * after_step hooks (the REPL on the terminal); the run goes on when it returns.
 *
 * Lua API (see trainer.lua):
 *   ctx = loop.new(task, events)   events[name] = array of {hook, fn, label}, in call order
 *   loop.run(ctx, opts)            opts: epochs, test_every, has_test, gc_step_kb, malloc_keep_mb,
 *                                  handle_signals, attach, train_batches (batches per train
 *                                  epoch, if known); goes on with a paused run
 *   loop.step(ctx, opts, 'steps', n) -> train steps run; loop.step(ctx, opts, 'phase') -> 0|1
 *   loop.state(ctx)                'idle' | 'paused' | 'running'
 *   loop.fire(ctx, event_id)       from a train step: after_forward / after_backward
 *   loop.hook_times(ctx)           array of {label=, event=, seconds=, calls=}
 *   loop.pending_signal()          'SIGTERM' | 'SIGINT' | 'SIGUSR1' received during a run, or nil
 *   loop.sigint_guard(on)          the REPL's SIGINT: only a flag, read by loop.sigint_taken()
 *   loop.now()                     monotonic seconds
 *   loop.events                    event names, index = id + 1
 *   loop.contract                  the task, timing and option fields this file uses (below) */
#include <errno.h>
#include <signal.h>
#include <lauxlib.h>
#include <lua.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crescent.h"
#include "signals.h"

typedef enum {
    CR_LOOP_BEFORE_TRAIN = 0,
    CR_LOOP_BEFORE_PHASE,
    CR_LOOP_BEFORE_STEP,
    CR_LOOP_AFTER_FORWARD,
    CR_LOOP_AFTER_BACKWARD,
    CR_LOOP_AFTER_STEP,
    CR_LOOP_AFTER_PHASE,
    CR_LOOP_AFTER_TRAIN,
    CR_LOOP_ON_EXCEPTION,
    CR_LOOP_EVENT_COUNT
} cr_loop_event;

static const char *const cr_loop_event_names[CR_LOOP_EVENT_COUNT] = {
    "before_train", "before_phase", "before_step", "after_forward", "after_backward",
    "after_step", "after_phase", "after_train", "on_exception"};

/* The loop/Task contract: every field of the task (RUN_TASK), of its timing table
 * (RUN_TIMING) and of loop.run's and loop.step's options (RUN_OPTS) that this file reads
 * or writes, who writes it and who reads it. loop.contract exports it ({table, key,
 * writer, reader} per field); spec/loop_contract_spec.lua checks that every field this
 * file names is listed here and that a new Task holds every field the loop reads. */
typedef struct {
    const char *table, *key, *writer, *reader;
} cr_loop_field;

static const cr_loop_field cr_loop_contract[] = {
    {"task", "epoch", "the loop (each phase); the checkpoint hook (resume)", "the loop; hooks"},
    {"task", "iteration", "the loop (after each train step); the checkpoint hook", "the loop; hooks; schedules"},
    {"task", "samples_seen", "the loop (after each train step); the checkpoint hook", "the loop; the timer hook"},
    {"task", "phase_iteration", "the loop (after each step); Task:_begin_phase (a resumed phase)", "the loop"},
    {"task", "phase_name", "the loop ('train' or 'test', at each phase)", "train and eval steps; hooks"},
    {"task", "batch", "the loop (the batch of the step in progress, nil between steps)", "steps; hooks"},
    {"task", "batch_size", "Task (a method: the samples in a batch)", "the loop (samples_seen)"},
    {"task", "train_step", "Task (steps.standard, or the user's function)", "the loop (each train step)"},
    {"task", "eval_step", "Task (steps.eval, or the user's function)", "the loop (each test step)"},
    {"task", "_begin_phase", "Task (a method)", "the loop (the start of each phase)"},
    {"task", "_batches", "Task (a method: the phase's batch iterator)", "the loop"},
    {"task", "_attach", "Task (a method: the REPL)", "the loop (a SIGUSR2 with opts.attach)"},
    {"task", "stop_requested", "hooks; steps; task:request_stop; the loop (a signal)", "the loop (after each step)"},
    {"task", "stop_reason", "task:request_stop; the loop ('signal')", "hooks; recipes"},
    {"task", "signal", "the loop; the distributed setup hook (another rank's signal)", "the loop; the checkpoint hook"},
    {"task", "exception", "the loop (before on_exception)", "on_exception hooks"},
    {"task", "traceback", "the loop (before on_exception)", "on_exception hooks"},
    {"task", "timing", "Task (the table the loop fills)", "the loop"},
    {"timing", "data", "the loop (each step: seconds waiting for the batch)", "the timer and diagnostics hooks"},
    {"timing", "forward_backward", "the loop (each step)", "the timer and diagnostics hooks"},
    {"timing", "optimizer", "the loop (each step)", "the timer and diagnostics hooks"},
    {"timing", "step", "the loop (each step, without the hooks fired inside it)", "the timer hook"},
    {"timing", "hooks", "the loop (each step)", "the diagnostics hook"},
    {"timing", "data_total", "the loop (train steps)", "the loop (a resumed run); hooks"},
    {"timing", "forward_backward_total", "the loop (train steps)", "the loop (a resumed run); hooks"},
    {"timing", "optimizer_total", "the loop (train steps)", "the loop (a resumed run); hooks"},
    {"timing", "hooks_total", "the loop (train steps)", "the loop (a resumed run); hooks"},
    {"timing", "steps", "the loop (train steps)", "the loop (a resumed run); hooks"},
    {"opts", "epochs", "the trainer (task.epochs)", "the loop (every call)"},
    {"opts", "test_every", "the trainer (task.test_every)", "the loop"},
    {"opts", "has_test", "the trainer (a test loader is set)", "the loop"},
    {"opts", "train_batches", "the trainer (batches per train epoch, if known)", "the loop (a phase's end)"},
    {"opts", "gc_step_kb", "the trainer (task.gc_step_kb)", "the loop (a GC step after each step)"},
    {"opts", "malloc_keep_mb", "the trainer (task.malloc_keep_mb)", "the loop (at the start)"},
    {"opts", "handle_signals", "the trainer (task.handle_signals ~= false)", "the loop (signal handlers)"},
    {"opts", "attach", "the trainer (task.repl_on_signal)", "the loop (SIGUSR2)"},
};

typedef struct {
    int hook_ref, fn_ref, label_ref; /* registry references */
    double seconds;
    long calls;
} cr_loop_slot;

typedef struct {
    int task_ref, timing_ref;
    cr_loop_slot *slots[CR_LOOP_EVENT_COUNT];
    int nslots[CR_LOOP_EVENT_COUNT];
    /* within the current step: when it started, when after_forward/after_backward fired,
     * and the seconds the hooks fired from inside the step took */
    double step_t0, fwd_t, bwd_t_end, inner_hooks;
    int saw_fwd, saw_bwd, in_step;
    double step_hooks; /* hook seconds of the whole step (before/after_step + inner) */
    int handle_signals, signal_stop; /* this run watches signals; one has stopped it */
    long phase_steps;                /* the phase in progress (or the last): its step counter */
    int phase_exhausted;             /* the last phase: its batches ran out */
    /* the run in progress, kept between loop.step calls: its stage, epoch and phase, the
     * options it started with, and a paused phase's iterator triple and step function */
    int stage, epoch, train, stop_after_test, eval_only; /* eval_only: epochs 0, one test phase */
    int epochs, test_every, has_test;
    double gc_kb, train_batches;
    int paused_ref[4];
    /* the phase's counters, loaded from the task when it begins or goes on */
    double iteration, samples, tot_data, tot_fb, tot_opt, tot_hooks, steps;
    int running, by_hand, interrupted; /* inside loop.run/step; driven by loop.step; paused by SIGINT */
} cr_loop_ctx;

enum { STAGE_IDLE = 0, STAGE_START, STAGE_NEXT_EPOCH, STAGE_IN_PHASE, STAGE_AFTER_TRAIN,
       STAGE_AFTER_TEST, STAGE_FINISH };
enum { DRIVE_RUN, DRIVE_STEPS, DRIVE_PHASE };

static const char *const CR_LOOP_MT = "crescent.loop.ctx";
static const char *const CR_LOOP_TB_KEY = "crescent.loop.traceback";
static const char *const CR_LOOP_LIVE_KEY = "crescent.loop.live";

/* A context's Lua references (its task, hooks, a paused phase's iterator) live in its
 * userdata's environment table, not in the registry: the task holds its context
 * (task._loop), so registry references would keep both alive for ever; this way the
 * collector frees the pair once nothing else holds them. The registry maps each live
 * context to its userdata through a weak-valued table. Pushes the environment table. */
static void cr_loop_push_refs(lua_State *L, cr_loop_ctx *c) {
    lua_getfield(L, LUA_REGISTRYINDEX, CR_LOOP_LIVE_KEY);
    lua_pushlightuserdata(L, c);
    lua_rawget(L, -2);
    lua_getfenv(L, -1);
    lua_replace(L, -3);
    lua_pop(L, 1);
}

/* Pushes the value of reference ref (nil for LUA_NOREF). */
static void cr_loop_get_ref(lua_State *L, cr_loop_ctx *c, int ref) {
    cr_loop_push_refs(L, c);
    lua_rawgeti(L, -1, ref);
    lua_remove(L, -2);
}

/* Pops the top value and returns a reference to it. */
static int cr_loop_make_ref(lua_State *L, cr_loop_ctx *c) {
    cr_loop_push_refs(L, c);
    lua_insert(L, -2);
    int ref = luaL_ref(L, -2);
    lua_pop(L, 1);
    return ref;
}

static void cr_loop_drop_ref(lua_State *L, cr_loop_ctx *c, int ref) {
    cr_loop_push_refs(L, c);
    luaL_unref(L, -1, ref);
    lua_pop(L, 1);
}

static double cr_loop_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cr_loop_ctx *cr_loop_check_ctx(lua_State *L, int idx) {
    return (cr_loop_ctx *)luaL_checkudata(L, idx, CR_LOOP_MT);
}

/* __gc: the references go with the environment table; the slots are C memory. */
static int cr_loop_gc(lua_State *L) {
    cr_loop_ctx *c = cr_loop_check_ctx(L, 1);
    for (int e = 0; e < CR_LOOP_EVENT_COUNT; e++) {
        free(c->slots[e]);
        c->slots[e] = NULL;
        c->nslots[e] = 0;
    }
    c->task_ref = c->timing_ref = LUA_NOREF;
    return 0;
}

/* loop.new(task, events) */
static int cr_loop_new(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    cr_loop_ctx *c = (cr_loop_ctx *)lua_newuserdata(L, sizeof *c);
    memset(c, 0, sizeof *c);
    c->task_ref = c->timing_ref = LUA_NOREF;
    for (int i = 0; i < 4; i++) c->paused_ref[i] = LUA_NOREF;
    luaL_getmetatable(L, CR_LOOP_MT);
    lua_setmetatable(L, -2);
    int ud = lua_gettop(L);
    lua_newtable(L);
    lua_setfenv(L, ud);
    lua_getfield(L, LUA_REGISTRYINDEX, CR_LOOP_LIVE_KEY);
    lua_pushlightuserdata(L, c);
    lua_pushvalue(L, ud);
    lua_rawset(L, -3);
    lua_pop(L, 1);

    lua_getfield(L, 1, "timing");
    if (!lua_istable(L, -1)) return luaL_error(L, "loop.new: task.timing must be a table");
    c->timing_ref = cr_loop_make_ref(L, c);
    lua_pushvalue(L, 1);
    c->task_ref = cr_loop_make_ref(L, c);

    for (int e = 0; e < CR_LOOP_EVENT_COUNT; e++) {
        lua_getfield(L, 2, cr_loop_event_names[e]);
        if (lua_isnil(L, -1)) { lua_pop(L, 1); continue; }
        if (!lua_istable(L, -1))
            return luaL_error(L, "loop.new: events.%s must be an array", cr_loop_event_names[e]);
        int n = (int)lua_objlen(L, -1);
        if (n > 0) {
            c->slots[e] = (cr_loop_slot *)calloc((size_t)n, sizeof(cr_loop_slot));
            if (!c->slots[e]) return luaL_error(L, "loop.new: out of memory");
        }
        for (int i = 0; i < n; i++) {
            lua_rawgeti(L, -1, i + 1);
            if (!lua_istable(L, -1))
                return luaL_error(L, "loop.new: events.%s[%d] must be {hook, fn, label}",
                                  cr_loop_event_names[e], i + 1);
            cr_loop_slot *s = &c->slots[e][i];
            lua_rawgeti(L, -1, 2);
            if (!lua_isfunction(L, -1))
                return luaL_error(L, "loop.new: events.%s[%d][2] must be a function",
                                  cr_loop_event_names[e], i + 1);
            s->fn_ref = cr_loop_make_ref(L, c);
            lua_rawgeti(L, -1, 1);
            s->hook_ref = cr_loop_make_ref(L, c);
            lua_rawgeti(L, -1, 3);
            s->label_ref = cr_loop_make_ref(L, c);
            c->nslots[e] = i + 1;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_settop(L, ud);
    return 1;
}

/* The message handler of every pcall in the loop: keeps the traceback aside for
 * task.traceback and returns the error object unchanged, so the error that finally
 * propagates is the one that was raised. */
static int cr_loop_msgh(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    lua_setfield(L, LUA_REGISTRYINDEX, CR_LOOP_TB_KEY);
    lua_settop(L, 1);
    return 1;
}

/* Runs the hooks of event e with task at stack index task_idx. protect: pcall with the
 * handler at msgh_idx (returns its status, error object on top); otherwise lua_call, so
 * an error propagates to whoever called us (loop.fire inside a step). */
static int cr_loop_fire_hooks(lua_State *L, cr_loop_ctx *c, int e, int task_idx, int msgh_idx,
                              double *hook_seconds) {
    int n = c->nslots[e];
    cr_loop_slot *s = c->slots[e];
    double total = 0;
    for (int i = 0; i < n; i++) {
        double t0 = cr_loop_now();
        cr_loop_get_ref(L, c, s[i].fn_ref);
        cr_loop_get_ref(L, c, s[i].hook_ref);
        lua_pushvalue(L, task_idx);
        if (msgh_idx) {
            int st = lua_pcall(L, 2, 0, msgh_idx);
            if (st) return st;
        } else {
            lua_call(L, 2, 0);
        }
        double dt = cr_loop_now() - t0;
        s[i].seconds += dt;
        s[i].calls++;
        total += dt;
    }
    if (hook_seconds) *hook_seconds += total;
    return 0;
}

/* loop.fire(ctx, event_id): a train step announces after_forward / after_backward. */
static int cr_loop_fire(lua_State *L) {
    cr_loop_ctx *c = cr_loop_check_ctx(L, 1);
    int e = (int)luaL_checkinteger(L, 2);
    if (e < 0 || e >= CR_LOOP_EVENT_COUNT) return luaL_error(L, "loop.fire: no event %d", e);
    double t = cr_loop_now();
    if (e == CR_LOOP_AFTER_FORWARD && !c->saw_fwd) { c->fwd_t = t; c->saw_fwd = 1; }
    lua_settop(L, 2);
    cr_loop_get_ref(L, c, c->task_ref);
    double hs = 0;
    cr_loop_fire_hooks(L, c, e, 3, 0, &hs);
    c->inner_hooks += hs;
    if (e == CR_LOOP_AFTER_BACKWARD) { c->bwd_t_end = cr_loop_now(); c->saw_bwd = 1; }
    return 0;
}

/* task.timing[key] = v, on an existing table: no allocation once the key exists. */
static void cr_loop_set_num(lua_State *L, int tbl, const char *key, double v) {
    lua_pushnumber(L, v);
    lua_setfield(L, tbl, key);
}

static double cr_loop_get_num(lua_State *L, int tbl, const char *key, double dflt) {
    lua_getfield(L, tbl, key);
    double v = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : dflt;
    lua_pop(L, 1);
    return v;
}

/* Stack slots of loop.run and loop.step, fixed so that every pcall uses the same handler. */
enum { RUN_CTX = 1, RUN_OPTS, RUN_MSGH, RUN_TASK, RUN_TIMING, RUN_ITER_F, RUN_ITER_S,
       RUN_ITER_C, RUN_STEP_FN, RUN_SIZE_FN, RUN_TOP = RUN_SIZE_FN };

/* Calls the function and self already pushed, with nargs arguments after them; pcall. */
static int cr_loop_call_method(lua_State *L, int nargs, int nres) {
    return lua_pcall(L, nargs + 1, nres, RUN_MSGH);
}

static int cr_loop_stop_requested(lua_State *L) {
    lua_getfield(L, RUN_TASK, "stop_requested");
    int stop = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return stop;
}

/* At a step or phase boundary: when this run watches signals and one was received, asks
 * the task to stop (once per run: task.stop_requested, stop_reason, signal, one line on
 * stderr). Returns whether a signal has stopped the run. A SIGINT while the run is driven
 * by hand (loop.step) only pauses it: c->interrupted. */
static int cr_loop_check_signal(lua_State *L, cr_loop_ctx *c) {
    if (!c->handle_signals) return 0;
    if (c->signal_stop) return 1;
    int sig = cr_loop_signal_pending();
    if (sig == SIGINT && c->by_hand) {
        c->interrupted = 1;
        return 0;
    }
    if (!sig) {
        /* a hook reported a signal received elsewhere (a distributed run's other rank):
         * the same stop as one received here */
        lua_getfield(L, RUN_TASK, "signal");
        c->signal_stop = lua_isstring(L, -1);
        lua_pop(L, 1);
        return c->signal_stop;
    }
    c->signal_stop = 1;
    const char *name = cr_loop_signal_name(sig);
    lua_pushboolean(L, 1);
    lua_setfield(L, RUN_TASK, "stop_requested");
    lua_pushstring(L, "signal");
    lua_setfield(L, RUN_TASK, "stop_reason");
    lua_pushstring(L, name);
    lua_setfield(L, RUN_TASK, "signal");
    cr_console_end_live_line();
    fprintf(stderr, "crescent: %s at iteration %.0f: finishing this step, checkpointing, exiting\n", name,
            cr_loop_get_num(L, RUN_TASK, "iteration", 0));
    fflush(stderr);
    return 1;
}

/* The phase's counters, from the task (a phase begins, or a paused one goes on: the user
 * may have changed them in between). */
static void cr_loop_load_counters(lua_State *L, cr_loop_ctx *c) {
    c->iteration = cr_loop_get_num(L, RUN_TASK, "iteration", 0);
    c->samples = cr_loop_get_num(L, RUN_TASK, "samples_seen", 0);
    c->tot_data = cr_loop_get_num(L, RUN_TIMING, "data_total", 0);
    c->tot_fb = cr_loop_get_num(L, RUN_TIMING, "forward_backward_total", 0);
    c->tot_opt = cr_loop_get_num(L, RUN_TIMING, "optimizer_total", 0);
    c->tot_hooks = cr_loop_get_num(L, RUN_TIMING, "hooks_total", 0);
    c->steps = cr_loop_get_num(L, RUN_TIMING, "steps", 0);
    c->phase_steps = (long)cr_loop_get_num(L, RUN_TASK, "phase_iteration", 0);
}

/* Begins a phase: task.phase and task.epoch, task:_begin_phase, before_phase, and the
 * batches (RUN_ITER_*) and step function (RUN_STEP_FN). Returns a pcall status or 0. */
static int cr_loop_phase_begin(lua_State *L, cr_loop_ctx *c, int train) {
    const char *phase = train ? "train" : "test";
    int st;
    c->train = train;
    lua_pushstring(L, phase);
    lua_setfield(L, RUN_TASK, "phase_name");
    lua_pushinteger(L, c->epoch);
    lua_setfield(L, RUN_TASK, "epoch");

    lua_getfield(L, RUN_TASK, "_begin_phase");
    lua_pushvalue(L, RUN_TASK);
    lua_pushstring(L, phase);
    if ((st = cr_loop_call_method(L, 1, 0))) return st;
    if ((st = cr_loop_fire_hooks(L, c, CR_LOOP_BEFORE_PHASE, RUN_TASK, RUN_MSGH, NULL))) return st;

    /* the batches: a generic-for triple from task:_batches(phase, epoch) */
    lua_getfield(L, RUN_TASK, "_batches");
    lua_pushvalue(L, RUN_TASK);
    lua_pushstring(L, phase);
    lua_pushinteger(L, c->epoch);
    if ((st = cr_loop_call_method(L, 2, 3))) return st;
    lua_replace(L, RUN_ITER_C);
    lua_replace(L, RUN_ITER_S);
    lua_replace(L, RUN_ITER_F);
    lua_getfield(L, RUN_TASK, train ? "train_step" : "eval_step");
    if (!lua_isfunction(L, -1) && !(lua_istable(L, -1) || lua_isuserdata(L, -1))) {
        lua_pushfstring(L, "task.%s must be a function(task, batch), got %s",
                        train ? "train_step" : "eval_step", luaL_typename(L, -1));
        return LUA_ERRRUN;
    }
    lua_replace(L, RUN_STEP_FN);
    /* phase_iteration: 0, or the resumed batch index that task:_begin_phase left */
    cr_loop_load_counters(L, c);
    c->phase_exhausted = 0;
    return 0;
}

enum { STEP_RAN, STEP_RAN_THEN_STOP, STEP_NONE_LEFT };

/* One step of the phase in progress: the next batch, before_step, the step function,
 * counters and timings, after_step. *outcome: STEP_RAN, STEP_RAN_THEN_STOP (a stop was
 * requested or a signal came) or STEP_NONE_LEFT (the batches ran out; no step ran).
 * Returns a pcall status (error object on top) or 0. */
static int cr_loop_phase_step(lua_State *L, cr_loop_ctx *c, int *outcome) {
    int st, train = c->train;
    double t0 = cr_loop_now();
    lua_pushvalue(L, RUN_ITER_F);
    lua_pushvalue(L, RUN_ITER_S);
    lua_pushvalue(L, RUN_ITER_C);
    if ((st = lua_pcall(L, 2, 1, RUN_MSGH))) return st;
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        c->phase_exhausted = 1;
        *outcome = STEP_NONE_LEFT;
        return 0;
    }
    double data_s = cr_loop_now() - t0;
    lua_pushvalue(L, -1);
    lua_replace(L, RUN_ITER_C);
    lua_setfield(L, RUN_TASK, "batch");

    c->step_hooks = 0;
    if ((st = cr_loop_fire_hooks(L, c, CR_LOOP_BEFORE_STEP, RUN_TASK, RUN_MSGH, &c->step_hooks))) return st;

    c->saw_fwd = c->saw_bwd = 0;
    c->inner_hooks = 0;
    c->in_step = 1;
    double t1 = c->step_t0 = cr_loop_now();
    lua_pushvalue(L, RUN_STEP_FN);
    lua_pushvalue(L, RUN_TASK);
    lua_getfield(L, RUN_TASK, "batch");
    st = lua_pcall(L, 2, 0, RUN_MSGH);
    c->in_step = 0;
    if (st) return st;
    double t2 = cr_loop_now();
    double fb, opt;
    if (c->saw_bwd) {
        fb = c->bwd_t_end - t1 - c->inner_hooks;
        opt = t2 - c->bwd_t_end;
    } else {
        fb = t2 - t1 - c->inner_hooks;
        opt = 0;
    }
    c->step_hooks += c->inner_hooks;

    c->phase_steps++;
    lua_pushinteger(L, c->phase_steps);
    lua_setfield(L, RUN_TASK, "phase_iteration");
    if (train) {
        /* samples: task:batch_size(batch), a Lua method (the loop cannot see inside a batch) */
        lua_pushvalue(L, RUN_SIZE_FN);
        lua_pushvalue(L, RUN_TASK);
        lua_pushvalue(L, RUN_ITER_C);
        if ((st = lua_pcall(L, 2, 1, RUN_MSGH))) return st;
        c->samples += lua_tonumber(L, -1);
        lua_pop(L, 1);
        c->iteration += 1;
        lua_pushnumber(L, c->iteration);
        lua_setfield(L, RUN_TASK, "iteration");
        lua_pushnumber(L, c->samples);
        lua_setfield(L, RUN_TASK, "samples_seen");
        c->tot_data += data_s;
        c->tot_fb += fb;
        c->tot_opt += opt;
        c->steps += 1;
    }
    cr_loop_set_num(L, RUN_TIMING, "data", data_s);
    cr_loop_set_num(L, RUN_TIMING, "forward_backward", fb);
    cr_loop_set_num(L, RUN_TIMING, "optimizer", opt);
    cr_loop_set_num(L, RUN_TIMING, "step", t2 - t1 - c->inner_hooks);

    /* a signal: the after_step hooks (a checkpoint) still run for this step */
    cr_loop_check_signal(L, c);
    if ((st = cr_loop_fire_hooks(L, c, CR_LOOP_AFTER_STEP, RUN_TASK, RUN_MSGH, &c->step_hooks))) return st;
    cr_loop_set_num(L, RUN_TIMING, "hooks", c->step_hooks);
    if (train) {
        c->tot_hooks += c->step_hooks;
        cr_loop_set_num(L, RUN_TIMING, "data_total", c->tot_data);
        cr_loop_set_num(L, RUN_TIMING, "forward_backward_total", c->tot_fb);
        cr_loop_set_num(L, RUN_TIMING, "optimizer_total", c->tot_opt);
        cr_loop_set_num(L, RUN_TIMING, "hooks_total", c->tot_hooks);
        cr_loop_set_num(L, RUN_TIMING, "steps", c->steps);
    }
    /* the step's tensor handles are garbage now: finalise some every iteration */
    if (c->gc_kb > 0) lua_gc(L, LUA_GCSTEP, (int)c->gc_kb);
    /* attaching (train.repl_on_signal): a SIGUSR2 opens task:_attach() here, between
     * steps; leaving it resumes the run */
    if (cr_loop_attach_take()) {
        lua_getfield(L, RUN_TASK, "_attach");
        lua_pushvalue(L, RUN_TASK);
        if ((st = cr_loop_call_method(L, 0, 0))) return st;
    }
    *outcome = (c->signal_stop || cr_loop_stop_requested(L)) ? STEP_RAN_THEN_STOP : STEP_RAN;
    return 0;
}

/* Ends the phase in progress: no batch, after_phase. */
static int cr_loop_phase_end(lua_State *L, cr_loop_ctx *c) {
    lua_pushnil(L);
    lua_setfield(L, RUN_TASK, "batch");
    lua_pushnil(L);
    lua_replace(L, RUN_ITER_C);
    return cr_loop_fire_hooks(L, c, CR_LOOP_AFTER_PHASE, RUN_TASK, RUN_MSGH, NULL);
}

/* Hooks of an event after a failure: each runs protected; an error of its own is
 * reported on stderr and does not hide the original one. */
static void cr_loop_fire_after_failure(lua_State *L, cr_loop_ctx *c, int e) {
    for (int i = 0; i < c->nslots[e]; i++) {
        cr_loop_slot *s = &c->slots[e][i];
        double t0 = cr_loop_now();
        cr_loop_get_ref(L, c, s->fn_ref);
        cr_loop_get_ref(L, c, s->hook_ref);
        lua_pushvalue(L, RUN_TASK);
        if (lua_pcall(L, 2, 0, RUN_MSGH)) {
            cr_loop_get_ref(L, c, s->label_ref);
            fprintf(stderr, "crescent: hook %s.%s failed while handling an error: %s\n",
                    lua_isstring(L, -1) ? lua_tostring(L, -1) : "?", cr_loop_event_names[e],
                    lua_isstring(L, -2) ? lua_tostring(L, -2) : "(non-string error)");
            lua_pop(L, 2);
        }
        s->seconds += cr_loop_now() - t0;
        s->calls++;
    }
}

/* Forgets a paused phase's iterator and step function. */
static void cr_loop_drop_paused(lua_State *L, cr_loop_ctx *c) {
    for (int i = 0; i < 4; i++) {
        cr_loop_drop_ref(L, c, c->paused_ref[i]);
        c->paused_ref[i] = LUA_NOREF;
    }
}

/* The error object on top of the stack ends the run: task.exception and task.traceback
 * are set, on_exception fires (and after_train too when it has not run yet), then the
 * original error propagates with its message. */
static int cr_loop_fail(lua_State *L, cr_loop_ctx *c, int then_after_train) {
    int err = lua_gettop(L);
    c->stage = STAGE_IDLE;
    cr_loop_drop_paused(L, c);
    lua_pushvalue(L, err);
    lua_setfield(L, RUN_TASK, "exception");
    lua_getfield(L, LUA_REGISTRYINDEX, CR_LOOP_TB_KEY);
    lua_setfield(L, RUN_TASK, "traceback");
    cr_loop_fire_after_failure(L, c, CR_LOOP_ON_EXCEPTION);
    if (then_after_train) cr_loop_fire_after_failure(L, c, CR_LOOP_AFTER_TRAIN);
    lua_settop(L, err);
    return lua_error(L);
}

/* Every step allocates and frees the same activation-sized blocks. glibc serves blocks
 * above its mmap threshold with a fresh mmap and returns them with munmap, so each step
 * page-faults its activations in again (~10% of a small ResNet step in the kernel
 * clearing pages). Raising the threshold to `mb` (glibc caps it at 32 MiB on 64-bit) and
 * keeping freed heap (no trim) makes steady-state steps reuse the same pages. The memory
 * is the step's own peak, which it needs again next step anyway. 0: leave glibc alone. */
static void cr_loop_keep_heap(double mb) {
    if (mb <= 0) return;
    if (mb > 32) mb = 32;
    int bytes = (int)(mb * 1024 * 1024);
    mallopt(M_MMAP_THRESHOLD, bytes);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 64 << 20);
}

/* Whether the train phase just run consumed every batch of its epoch: its batches ran
 * out, or its step counter reached the known count (a stop at the last batch). */
static int cr_loop_train_complete(const cr_loop_ctx *c) {
    return c->phase_exhausted || (c->train_batches > 0 && (double)c->phase_steps >= c->train_batches);
}

static void cr_loop_set_epoch(lua_State *L, cr_loop_ctx *c, int epoch) {
    c->epoch = epoch;
    lua_pushinteger(L, epoch);
    lua_setfield(L, RUN_TASK, "epoch");
}

/* Drives the run through its stages (state in c, so loop.step can pause and go on):
 * before_train; per epoch the train phase, then the test phase when due; after_train.
 * DRIVE_RUN goes to the end; DRIVE_STEPS pauses before train step number `budget` + 1 of
 * this call (test phases on the way run whole); DRIVE_PHASE returns when a phase has
 * ended. *done counts train steps (DRIVE_STEPS) or phases (DRIVE_PHASE). Also returns,
 * paused, when a SIGINT interrupts a run driven by hand. Returns a pcall status (error
 * object on top) or 0. */
static int cr_loop_drive(lua_State *L, cr_loop_ctx *c, int mode, long budget, long *done) {
    int st;
    for (;;) {
        switch (c->stage) {
        case STAGE_START:
            c->signal_stop = 0;
            c->eval_only = 0;
            lua_pushnil(L);
            lua_setfield(L, RUN_TASK, "signal");
            if ((st = cr_loop_fire_hooks(L, c, CR_LOOP_BEFORE_TRAIN, RUN_TASK, RUN_MSGH, NULL))) return st;
            /* after before_train: a hook there may have restored a checkpoint */
            c->epoch = (int)cr_loop_get_num(L, RUN_TASK, "epoch", 0);
            cr_loop_check_signal(L, c);
            c->stage = STAGE_NEXT_EPOCH;
            break;
        case STAGE_NEXT_EPOCH:
            if (c->epochs == 0 && c->epoch == 0 && c->has_test && c->test_every > 0 && !c->eval_only &&
                !c->signal_stop) {
                /* train.epochs = 0: an evaluation-only run, one test phase of the weights given */
                c->eval_only = 1;
                if ((st = cr_loop_phase_begin(L, c, 0))) return st;
                c->stage = STAGE_IN_PHASE;
                break;
            }
            if (c->signal_stop || c->epoch >= c->epochs) {
                c->stage = STAGE_FINISH;
                break;
            }
            if ((st = cr_loop_phase_begin(L, c, 1))) return st;
            c->stage = STAGE_IN_PHASE;
            break;
        case STAGE_IN_PHASE: {
            if (c->interrupted) return 0;
            if (mode == DRIVE_STEPS && c->train && *done >= budget) return 0;
            int outcome;
            if ((st = cr_loop_phase_step(L, c, &outcome))) return st;
            if (outcome != STEP_NONE_LEFT && c->train && mode == DRIVE_STEPS) (*done)++;
            if (outcome == STEP_RAN) break;
            if ((st = cr_loop_phase_end(L, c))) return st;
            c->stage = c->train ? STAGE_AFTER_TRAIN : STAGE_AFTER_TEST;
            if (mode == DRIVE_PHASE) {
                (*done)++;
                return 0;
            }
            break;
        }
        case STAGE_AFTER_TRAIN: {
            int complete = cr_loop_train_complete(c);
            if (cr_loop_check_signal(L, c)) {
                /* no test after a signal; an epoch cut short is not counted as done */
                if (complete) cr_loop_set_epoch(L, c, c->epoch + 1);
                c->stage = STAGE_FINISH;
                break;
            }
            int stop = cr_loop_stop_requested(L);
            int e = c->epoch;
            int test = c->has_test && c->test_every > 0 &&
                       ((e + 1) % c->test_every == 0 || e == c->epochs - 1 || stop);
            if (test) {
                c->stop_after_test = stop;
                if ((st = cr_loop_phase_begin(L, c, 0))) return st;
                c->stage = STAGE_IN_PHASE;
            } else {
                cr_loop_set_epoch(L, c, e + 1);
                c->stage = stop ? STAGE_FINISH : STAGE_NEXT_EPOCH;
            }
            break;
        }
        case STAGE_AFTER_TEST:
            cr_loop_check_signal(L, c);
            if (c->eval_only) { /* no epoch was trained */
                c->stage = STAGE_FINISH;
                break;
            }
            cr_loop_set_epoch(L, c, c->epoch + 1);
            c->stage = (c->stop_after_test || c->signal_stop) ? STAGE_FINISH : STAGE_NEXT_EPOCH;
            break;
        case STAGE_FINISH:
            lua_pushnil(L);
            lua_setfield(L, RUN_TASK, "phase_name");
            c->stage = STAGE_IDLE;
            cr_loop_drop_paused(L, c);
            st = cr_loop_fire_hooks(L, c, CR_LOOP_AFTER_TRAIN, RUN_TASK, RUN_MSGH, NULL);
            if (!st) return 0;
            /* after_train itself failed: on_exception still hears of it */
            return cr_loop_fail(L, c, 0);
        default: /* STAGE_IDLE: nothing to drive */
            return 0;
        }
    }
}

/* The body of loop.run / loop.step (ctx, opts, mode, budget), under their pcall so that
 * the signal handlers come off on every way out. A run that is not in progress starts
 * from opts; a paused one goes on with its own. Pushes the count of train steps or
 * phases done (loop.step's result). */
static int cr_loop_body(lua_State *L) {
    cr_loop_ctx *c = cr_loop_check_ctx(L, RUN_CTX);
    luaL_checktype(L, RUN_OPTS, LUA_TTABLE);
    int mode = (int)luaL_checkinteger(L, 3);
    long budget = (long)luaL_checknumber(L, 4);
    lua_settop(L, RUN_OPTS);
    lua_pushcfunction(L, cr_loop_msgh);                    /* RUN_MSGH */
    cr_loop_get_ref(L, c, c->task_ref);        /* RUN_TASK */
    cr_loop_get_ref(L, c, c->timing_ref);      /* RUN_TIMING */
    for (int i = 0; i < 4; i++)                            /* RUN_ITER_F/S/C, RUN_STEP_FN */
        cr_loop_get_ref(L, c, c->paused_ref[i]);
    cr_loop_drop_paused(L, c);
    lua_getfield(L, RUN_TASK, "batch_size");               /* RUN_SIZE_FN */
    if (!lua_isfunction(L, RUN_SIZE_FN)) return luaL_error(L, "loop.run: task.batch_size must be a method");

    /* read on every call: between two loop.step calls the user may change task.epochs */
    c->epochs = (int)cr_loop_get_num(L, RUN_OPTS, "epochs", 1);
    c->test_every = (int)cr_loop_get_num(L, RUN_OPTS, "test_every", 0);
    c->gc_kb = cr_loop_get_num(L, RUN_OPTS, "gc_step_kb", 0);
    c->train_batches = cr_loop_get_num(L, RUN_OPTS, "train_batches", 0);
    lua_getfield(L, RUN_OPTS, "has_test");
    c->has_test = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (c->stage == STAGE_IDLE) {
        cr_loop_keep_heap(cr_loop_get_num(L, RUN_OPTS, "malloc_keep_mb", 0));
        c->stage = STAGE_START;
    } else if (c->stage == STAGE_IN_PHASE) {
        cr_loop_load_counters(L, c);
    }
    long done = 0;
    int st = cr_loop_drive(L, c, mode, budget, &done);
    if (st) return cr_loop_fail(L, c, 1); /* on_exception, then after_train (it always runs) */
    if (c->stage == STAGE_IN_PHASE) {
        /* paused inside a phase: keep its iterator and step function for the next call */
        for (int i = 3; i >= 0; i--) {
            lua_pushvalue(L, RUN_ITER_F + i);
            c->paused_ref[i] = cr_loop_make_ref(L, c);
        }
    }
    lua_pushnumber(L, (double)done);
    return 1;
}

/* loop.run(ctx, opts) / loop.step(ctx, opts, 'steps' | 'phase', n): the body under a
 * pcall, between installing the signal handlers (opts.handle_signals; opts.attach adds
 * SIGUSR2) and putting the previous ones back; an error propagates unchanged afterwards. */
static int cr_loop_enter(lua_State *L, int mode, long budget) {
    cr_loop_ctx *c = cr_loop_check_ctx(L, RUN_CTX);
    luaL_checktype(L, RUN_OPTS, LUA_TTABLE);
    lua_settop(L, RUN_OPTS);
    if (c->running)
        return luaL_error(L, "this task's loop is already running (you are inside one of its steps, hooks "
                             "or an attached REPL); leave it and the run goes on");
    lua_getfield(L, RUN_OPTS, "handle_signals");
    int handle = lua_toboolean(L, -1);
    lua_getfield(L, RUN_OPTS, "attach");
    int attach = lua_toboolean(L, -1);
    lua_pop(L, 2);
    if ((handle || attach) && cr_loop_signals_install(handle, attach) != 0)
        return luaL_error(L, "loop.run: cannot install the signal handlers (%s); set "
                             "train.handle_signals=false to run without them", strerror(errno));
    int outer = c->handle_signals;
    c->handle_signals = handle;
    c->by_hand = mode != DRIVE_RUN;
    c->interrupted = 0;
    c->running = 1;
    lua_pushcfunction(L, cr_loop_body);
    lua_insert(L, RUN_CTX);
    lua_pushinteger(L, mode);
    lua_pushnumber(L, (double)budget);
    int st = lua_pcall(L, 4, 1, 0);
    c->running = 0;
    c->handle_signals = outer;
    if (c->interrupted && c->stage != STAGE_IDLE)
        fprintf(stderr, "crescent: SIGINT: paused after iteration %.0f; task:step() goes on\n", c->iteration);
    if (handle || attach) cr_loop_signals_restore();
    if (st) return lua_error(L);
    return 1;
}

static int cr_loop_run(lua_State *L) {
    lua_settop(L, RUN_OPTS);
    cr_loop_enter(L, DRIVE_RUN, 0);
    return 0;
}

/* loop.step(ctx, opts, 'steps', n) -> train steps run; loop.step(ctx, opts, 'phase')
 * -> phases ended (0 or 1) */
static int cr_loop_step(lua_State *L) {
    const char *what = luaL_checkstring(L, 3);
    int mode;
    long n = 1;
    if (strcmp(what, "steps") == 0) {
        mode = DRIVE_STEPS;
        n = (long)luaL_checknumber(L, 4);
    } else if (strcmp(what, "phase") == 0) {
        mode = DRIVE_PHASE;
    } else {
        return luaL_error(L, "loop.step: 'steps' or 'phase', got '%s'", what);
    }
    lua_settop(L, RUN_OPTS);
    return cr_loop_enter(L, mode, n);
}

/* loop.state(ctx) -> 'idle' (no run in progress), 'paused' (a run driven by loop.step
 * waits for the next call) or 'running' */
static int cr_loop_state(lua_State *L) {
    cr_loop_ctx *c = cr_loop_check_ctx(L, 1);
    lua_pushstring(L, c->running ? "running" : c->stage == STAGE_IDLE ? "idle" : "paused");
    return 1;
}

/* loop.hook_times(ctx) -> array of {label, event, seconds, calls} in firing order */
static int cr_loop_hook_times(lua_State *L) {
    cr_loop_ctx *c = cr_loop_check_ctx(L, 1);
    lua_newtable(L);
    int k = 0;
    for (int e = 0; e < CR_LOOP_EVENT_COUNT; e++) {
        for (int i = 0; i < c->nslots[e]; i++) {
            cr_loop_slot *s = &c->slots[e][i];
            lua_createtable(L, 0, 4);
            cr_loop_get_ref(L, c, s->label_ref);
            lua_setfield(L, -2, "label");
            lua_pushstring(L, cr_loop_event_names[e]);
            lua_setfield(L, -2, "event");
            lua_pushnumber(L, s->seconds);
            lua_setfield(L, -2, "seconds");
            lua_pushnumber(L, (double)s->calls);
            lua_setfield(L, -2, "calls");
            lua_rawseti(L, -2, ++k);
        }
    }
    return 1;
}

/* loop.pending_signal() -> 'SIGTERM' | 'SIGINT' | 'SIGUSR1' received during a run that
 * handles signals (hooks may ask), or nil */
static int cr_loop_pending_signal_l(lua_State *L) {
    int sig = cr_loop_signal_pending();
    if (sig) lua_pushstring(L, cr_loop_signal_name(sig));
    else lua_pushnil(L);
    return 1;
}

/* loop.sigint_guard(on): the REPL's SIGINT guard (signals.h) */
static int cr_loop_sigint_guard_l(lua_State *L) {
    if (cr_loop_sigint_guard(lua_toboolean(L, 1)) != 0)
        return luaL_error(L, "loop.sigint_guard: sigaction failed (%s)", strerror(errno));
    return 0;
}

/* loop.sigint_taken() -> whether a guarded SIGINT arrived since the last call */
static int cr_loop_sigint_taken_l(lua_State *L) {
    lua_pushboolean(L, cr_loop_sigint_taken());
    return 1;
}

static int cr_loop_now_l(lua_State *L) {
    lua_pushnumber(L, cr_loop_now());
    return 1;
}

int luaopen_crescent_loop(lua_State *L);
int luaopen_crescent_loop(lua_State *L) {
    if (luaL_newmetatable(L, CR_LOOP_MT)) {
        lua_pushcfunction(L, cr_loop_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, CR_LOOP_LIVE_KEY);
    if (lua_isnil(L, -1)) {
        lua_newtable(L); /* lightuserdata ctx -> its userdata, weak values */
        lua_newtable(L);
        lua_pushliteral(L, "v");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        lua_setfield(L, LUA_REGISTRYINDEX, CR_LOOP_LIVE_KEY);
    }
    lua_pop(L, 1);
    static const luaL_Reg fns[] = {{"new", cr_loop_new},           {"run", cr_loop_run},
                                   {"step", cr_loop_step},         {"state", cr_loop_state},
                                   {"fire", cr_loop_fire},         {"hook_times", cr_loop_hook_times},
                                   {"pending_signal", cr_loop_pending_signal_l},
                                   {"sigint_guard", cr_loop_sigint_guard_l},
                                   {"sigint_taken", cr_loop_sigint_taken_l},
                                   {"now", cr_loop_now_l},         {NULL, NULL}};
    lua_newtable(L);
    luaL_register(L, NULL, fns);
    lua_createtable(L, CR_LOOP_EVENT_COUNT, 0);
    for (int e = 0; e < CR_LOOP_EVENT_COUNT; e++) {
        lua_pushstring(L, cr_loop_event_names[e]);
        lua_rawseti(L, -2, e + 1);
        lua_pushinteger(L, e);
        lua_setfield(L, -3, cr_loop_event_names[e]); /* loop.after_forward = 3, ... */
    }
    lua_setfield(L, -2, "events");
    int nfields = (int)(sizeof cr_loop_contract / sizeof cr_loop_contract[0]);
    lua_createtable(L, nfields, 0);
    for (int i = 0; i < nfields; i++) {
        lua_createtable(L, 0, 4);
        lua_pushstring(L, cr_loop_contract[i].table);
        lua_setfield(L, -2, "table");
        lua_pushstring(L, cr_loop_contract[i].key);
        lua_setfield(L, -2, "key");
        lua_pushstring(L, cr_loop_contract[i].writer);
        lua_setfield(L, -2, "writer");
        lua_pushstring(L, cr_loop_contract[i].reader);
        lua_setfield(L, -2, "reader");
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "contract");
    return 1;
}
