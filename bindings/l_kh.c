/* l_kh.c: the `kh` module: assembles the per-module tables (kh.json,
 * kh.time, ...) and the few engine-wide functions (kh.version, kh.doctor,
 * kh.stats, kh.config, kh.isatty).  It sits on top of the other bindings
 * and loads nothing from policies/: a script that wants the comparison of
 * runs requires lib.report itself (kh_run.c puts policies/ on its path). */
#include "l_kh.h"

#include "l_check.h"
#include "l_compile.h"
#include "l_eval.h"
#include "l_json.h"
#include "l_llm.h"
#include "l_profile.h"
#include "l_records.h"
#include "l_store.h"
#include "l_task.h"
#include "l_tensor.h"
#include "l_time.h"

#include "core/doctor.h"
#include "core/proc.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <lmdb.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* kh.doctor() -> the machine report (see doctor.h) as a table. */
static int l_doctor(lua_State *L)
{
    kh_err err;
    json_t *r = kh_doctor_report(kh_lua_engine(L), &err);
    if (!r)
        return kh_lua_fail(L, &err);
    kh_lua_push_json(L, r);
    json_decref(r);
    return 1;
}

/* kh.stats() -> {live_objects = n}: engine objects still open. */
static int l_stats(lua_State *L)
{
    kh_engine *e = kh_lua_engine(L);
    lua_createtable(L, 0, 1);
    lua_pushinteger(L, kh_engine_live_objects(e));
    lua_setfield(L, -2, "live_objects");
    return 1;
}

/* kh.isatty(file | fd) -> true when it is a terminal: a policy draws its
 * progress line only there (Lua's io library cannot tell). */
static int l_isatty(lua_State *L)
{
    int fd;
    if (lua_type(L, 1) == LUA_TNUMBER) {
        lua_Integer n = luaL_checkinteger(L, 1);
        luaL_argcheck(L, n >= 0 && n <= 1 << 20, 1, "not a file descriptor");
        fd = (int)n;
    } else {
        luaL_Stream *p = luaL_checkudata(L, 1, LUA_FILEHANDLE);
        luaL_argcheck(L, p->closef != NULL && p->f != NULL, 1, "attempt to use a closed file");
        fd = fileno(p->f);
    }
    lua_pushboolean(L, fd >= 0 && isatty(fd));
    return 1;
}

/* kh.secure_seed([bits]) -> a seed of `bits` bits (1..63, default 63) from
 * the OS CSPRNG: what a policy seeds its own evaluations with when the user
 * gave no --seed, so a candidate cannot predict them.  nil, msg, code when
 * the OS gives none. */
static int l_secure_seed(lua_State *L)
{
    lua_Integer bits = luaL_optinteger(L, 1, 63);
    luaL_argcheck(L, bits >= 1 && bits <= 63, 1, "bits: 1 to 63");
    uint64_t v;
    kh_err err;
    if (kh_secure_seed(&v, &err))
        return kh_lua_fail(L, &err);
    lua_pushinteger(L, (lua_Integer)(v >> (63 - bits)));
    return 1;
}

/* kh.process() -> {pid, host, start}: this process as a liveness mark names
 * it (a run record carries one; engine/core/proc.h). */
static int l_process(lua_State *L)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1))
        host[0] = 0;
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)getpid());
    lua_setfield(L, -2, "pid");
    lua_pushstring(L, host);
    lua_setfield(L, -2, "host");
    lua_pushinteger(L, (lua_Integer)kh_proc_start_time((long)getpid()));
    lua_setfield(L, -2, "start");
    return 1;
}

/* kh.process_alive(mark) -> true | false | nil (this machine cannot tell: the
 * mark names another host, or there is no /proc). */
static int l_process_alive(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "pid");
    lua_getfield(L, 1, "host");
    lua_getfield(L, 1, "start");
    long pid = (long)luaL_optinteger(L, -3, 0);
    const char *h = lua_tostring(L, -2);
    unsigned long long start = (unsigned long long)luaL_optinteger(L, -1, 0);
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) || !h || strcmp(h, host)) {
        lua_pushnil(L);
        return 1;
    }
    int a = kh_proc_alive(pid, start);
    if (a < 0)
        lua_pushnil(L);
    else
        lua_pushboolean(L, a);
    return 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* kh.listdir(path): the names in the folder (not "." or ".."), sorted
 * bytewise; nil, message when it cannot be read.  What policies used `ls`
 * for: they never shell out. */
static int l_listdir(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    DIR *d = opendir(path);
    if (!d) {
        lua_pushnil(L);
        lua_pushfstring(L, "cannot read folder %s: %s", path, strerror(errno));
        return 2;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int oom = 0;
    struct dirent *de;
    while (!oom && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 32;
            char **g = realloc(names, nc * sizeof *g);
            if (!g) {
                oom = 1;
                break;
            }
            names = g;
            cap = nc;
        }
        if (!(names[n] = kh_strdup(de->d_name)))
            oom = 1;
        else
            n++;
    }
    closedir(d);
    if (!oom && n)
        qsort(names, n, sizeof *names, cmp_str);
    /* the C copies go before anything can raise */
    if (!oom && !lua_checkstack(L, 2))
        oom = 1;
    if (!oom)
        lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        if (!oom) {
            lua_pushstring(L, names[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        free(names[i]);
    }
    free(names);
    if (oom)
        return luaL_error(L, "kh.listdir: out of memory");
    return 1;
}

/* kh.mkdir(path): make the folder and any missing parents (mkdir -p);
 * true, or nil, message naming the part that could not be made. */
static int l_mkdir(lua_State *L)
{
    size_t n;
    const char *path = luaL_checklstring(L, 1, &n);
    if (n == 0 || n >= 4096)
        return luaL_argerror(L, 1, n ? "path too long" : "empty path");
    char buf[4096];
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        struct stat sb;
        if (mkdir(buf, 0777) && errno != EEXIST) {
            lua_pushnil(L);
            lua_pushfstring(L, "cannot make folder %s: %s", buf, strerror(errno));
            return 2;
        }
        if (stat(buf, &sb) || !S_ISDIR(sb.st_mode)) {
            lua_pushnil(L);
            lua_pushfstring(L, "%s is not a folder", buf);
            return 2;
        }
        *p = c;
        if (c == '\0')
            break;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static void push_versions(lua_State *L, kh_engine *e)
{
    /* [kh] -> [kh, versions] */
    lua_createtable(L, 0, 8);
    lua_pushstring(L, KH_VERSION);
    lua_setfield(L, -2, "khlua");
    lua_pushstring(L, KH_GIT_REV);
    lua_setfield(L, -2, "git");
    lua_pushstring(L, LUA_RELEASE);
    lua_setfield(L, -2, "lua");
    lua_pushstring(L, mdb_version(NULL, NULL, NULL));
    lua_setfield(L, -2, "lmdb");
    lua_pushstring(L, curl_version_info(CURLVERSION_NOW)->version);
    lua_setfield(L, -2, "curl");
    lua_pushstring(L, jansson_version_str());
    lua_setfield(L, -2, "jansson");
    const kh_nvrtc_api *nv = kh_engine_nvrtc(e, NULL);
    if (nv)
        lua_pushfstring(L, "%d.%d", nv->major, nv->minor);
    else
        lua_pushboolean(L, 0);
    lua_setfield(L, -2, "nvrtc");
}

int kh_luaopen_kh(lua_State *L)
{
    kh_engine *e = kh_lua_engine(L);
    static const luaL_Reg fns[] = {
        {"doctor", l_doctor}, {"stats", l_stats}, {"isatty", l_isatty},
        {"secure_seed", l_secure_seed}, {"process", l_process},
        {"process_alive", l_process_alive}, {"mkdir", l_mkdir}, {"listdir", l_listdir},
        {NULL, NULL},
    };
    kh_lua_newlib(L, e, fns);

    static const struct {
        const char *name;
        void (*open)(lua_State *, kh_engine *);
    } modules[] = {
        {"json", kh_open_json},
        {"time", kh_open_time},
        {"llm", kh_open_llm},
        {"task", kh_open_task},
        {"tensor", kh_open_tensor},
        {"check", kh_open_check},
        {"compile", kh_open_compile},
        {"store", kh_open_store},
        {"profile", kh_open_profile},
        {"eval", kh_open_eval},
    };
    for (size_t i = 0; i < KH_ARRAY_LEN(modules); i++) {
        modules[i].open(L, e);
        lua_setfield(L, -2, modules[i].name);
    }
    /* the record writers (tx:put_run, ...) on the transactions kh.store made */
    kh_open_records(L);

    push_versions(L, e);
    lua_setfield(L, -2, "version");

    lua_createtable(L, 0, 2);
    lua_pushstring(L, kh_engine_store_path(e));
    lua_setfield(L, -2, "store");
    lua_pushstring(L, kh_engine_cuda_home(e));
    lua_setfield(L, -2, "cuda_home");
    lua_setfield(L, -2, "config");
    return 1;
}
