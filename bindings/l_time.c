/* l_time.c: kh.time, the clocks policies need (Lua's os.clock is CPU time)
 * and a sleep that Ctrl-C interrupts. */
#include "l_time.h"

#include <errno.h>
#include <time.h>

/* kh.time.now() -> monotonic seconds (for durations). */
static int l_now(lua_State *L)
{
    lua_pushnumber(L, kh_now());
    return 1;
}

/* kh.time.wall() -> seconds since the epoch, with fractions. */
static int l_wall(lua_State *L)
{
    lua_pushnumber(L, kh_wall_now());
    return 1;
}

/* kh.time.sleep(seconds) -> true, or nil, "interrupted", "EINTR" on Ctrl-C. */
static int l_sleep(lua_State *L)
{
    kh_engine *e = kh_lua_engine(L);
    lua_Number s = luaL_checknumber(L, 1);
    luaL_argcheck(L, s >= 0 && s <= 86400.0 * 365, 1, "seconds must be in [0, 1 year]");
    double end = kh_now() + s;
    for (;;) {
        if (kh_engine_stop_requested(e)) {
            kh_err err;
            kh_err_set(&err, KH_EINTR, "interrupted");
            return kh_lua_fail(L, &err);
        }
        double left = end - kh_now();
        if (left <= 0)
            break;
        if (left > 0.05)
            left = 0.05;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
    lua_pushboolean(L, 1);
    return 1;
}

void kh_open_time(lua_State *L, kh_engine *e)
{
    static const luaL_Reg fns[] = {
        {"now", l_now}, {"wall", l_wall}, {"sleep", l_sleep}, {NULL, NULL},
    };
    kh_lua_newlib(L, e, fns);
}
