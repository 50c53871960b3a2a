/* scrub.h: what must not leave the coordinator.  Two rules, kept together:
 *   - which environment variables may hold a credential (by name), so that
 *     workers, compilers and tools never inherit them;
 *   - which text looks like a secret, so that what a candidate can make a
 *     child print (a crash's stderr, a compile log) reaches a verdict, a log
 *     or a record cut to size and with secrets replaced by "[redacted]".
 * Callers decide where text crosses that line; this unit only says what is
 * dropped there. */
#ifndef KH_SCRUB_H
#define KH_SCRUB_H

#include "core/kh.h"

/* What replaces a secret in scrubbed text. */
#define KH_SCRUB_REDACTED "[redacted]"
/* The default bound on scrubbed text, in bytes, the cut note included. */
#define KH_SCRUB_MAX 2048

/* 1 when an environment variable of this name (len bytes, no '=') may hold a
 * credential: the name contains KEY, TOKEN, SECRET, PASS, CREDENTIAL, AUTH,
 * COOKIE, SESSION, PRIVATE, WEBHOOK or CANARY, or starts with a provider's
 * prefix (ANTHROPIC_, OPENAI_, GEMINI_, GOOGLE_, AWS_, AZURE_, HF_, HUGGING,
 * GITHUB_, GH_, KHLUA_REDTEAM_, ...), case-insensitively.  0 otherwise
 * (PATH, HOME, LANG, TMPDIR, CUDA_*, LD_LIBRARY_PATH, ASAN_OPTIONS, KHLUA_*). */
int kh_scrub_secret_name(const char *name, size_t len);

/* The environment a child gets: the entries of env ("NAME=value", NULL-
 * terminated; NULL: none) whose names are not secret, except the names in
 * keep (NULL-terminated list of names, may be NULL), which pass whatever they
 * are; then every entry of extra (NULL-terminated, may be NULL), which
 * replaces an entry of env of the same name.  Returns a malloc'ed
 * NULL-terminated array of pointers into env and extra: free the array
 * alone, and keep env and extra alive while it is used.  NULL when out of
 * memory. */
char **kh_scrub_env(char *const *env, const char *const *keep, char *const *extra);

typedef enum kh_scrub_keep {
    KH_SCRUB_TAIL, /* keep the end: a crash's last words */
    KH_SCRUB_HEAD, /* keep the start: a compile log's first errors */
} kh_scrub_keep;

/* text (len bytes, any bytes) made fit for a verdict, a log or a record:
 *   1. secrets replaced by KH_SCRUB_REDACTED: API keys by their shape
 *      (sk-ant-..., sk-... of 20 characters or more, AKIA + 16, ghp_ / gho_ /
 *      github_pat_ ..., xoxb- ...), "Bearer <token>", the value of
 *      api_key= / token= / password= / secret= (and ':' forms), runs of 32
 *      or more hex digits, runs of 32 or more base64 characters that mix
 *      upper case, lower case and digits, and the exact value of every
 *      variable of this process's environment whose name is secret
 *      (kh_scrub_secret_name) and whose value is 8 bytes or longer;
 *   2. cut to at most max bytes (0: KH_SCRUB_MAX; 64 at least), keeping the end or the
 *      start, with a note "[... N bytes cut]" that counts toward max.
 * The result is valid UTF-8 without NUL bytes, malloc'ed (caller frees);
 * NULL only when out of memory. */
char *kh_scrub_text(const char *text, size_t len, size_t max, kh_scrub_keep keep);

#endif
