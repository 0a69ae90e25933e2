/**
 * @module
 * `watchResponse()`: hears what a request's `c.res` is set to from then on, for a
 * middleware whose work goes on after it returned. shed() holds a slot on the body it
 * handed out and must free it when a middleware in front drops that answer for another
 * (hono/trailing-slash's redirect, a `c.res = …` after `next()`, a throw after `next()`,
 * whose onError answer Hono's compose sets as `c.res`); idempotency() tells the headers
 * set behind it from those set in front.
 */

import type { Context } from 'hono';

/**
 * Told what `c.res` is about to become, before Hono sets it (so `c.res` is still the old
 * one). A set to `undefined` is no answer yet: Hono's documented way to replace headers
 * is `c.res = undefined; c.res = new Response(c.res.body, …)`, and idempotency() does the
 * same, so the watchers hear the next set instead, or, if `c.res` is read first, the
 * answer Hono's getter makes then.
 */
export type ResponseWatcher = (next: Response) => void;

/** The watchers of each watched context (one `res` accessor per context, however many watch). */
const watched = new WeakMap<Context, Set<ResponseWatcher>>();

/**
 * Calls `watcher` with each value `c.res` is set to from now on, until the returned
 * function is called. Hono keeps `res` behind an accessor on `Context.prototype`; this
 * puts one of its own on `c` that tells the watchers and then calls Hono's, so setting
 * `c.res` means what it did. Removed with the last watcher. A Hono whose `res` is no
 * accessor cannot be watched: `watcher` is never called.
 */
export function watchResponse(c: Context, watcher: ResponseWatcher): () => void {
  let watchers = watched.get(c);
  if (watchers === undefined) {
    let hono: PropertyDescriptor | undefined;
    for (let proto = Object.getPrototypeOf(c); proto !== null && hono === undefined; ) {
      hono = Object.getOwnPropertyDescriptor(proto, 'res');
      proto = Object.getPrototypeOf(proto);
    }
    const { get, set } = hono ?? {};
    if (get === undefined || set === undefined) return () => {};
    const all = new Set<ResponseWatcher>();
    watchers = all;
    watched.set(c, all);
    let unset = false;
    Object.defineProperty(c, 'res', {
      configurable: true,
      get() {
        const res: Response = get.call(c);
        if (unset) {
          unset = false;
          for (const each of all) each(res);
        }
        return res;
      },
      set(value: Response | undefined) {
        unset = value === undefined;
        if (value !== undefined) for (const each of all) each(value);
        set.call(c, value);
      },
    });
  }
  const all = watchers;
  all.add(watcher);
  return () => {
    if (all.delete(watcher) && all.size === 0) {
      watched.delete(c);
      delete (c as { res?: unknown }).res;
    }
  };
}
