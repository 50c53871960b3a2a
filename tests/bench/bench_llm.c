/* bench_llm.c: client CPU time per model call with 64 streams in flight on
 * one thread, against the loopback mock server (tests/mock_llm.py).  The
 * anchor, measured side by side in the same run, is bare libcurl multi
 * fetching the same streams and discarding the bytes: the ratio is what
 * khlua's parsing, retries bookkeeping and transcripts cost on top of HTTP.
 *
 *   bench_llm [--streams 64] [--rounds 3] [--fault ok|big]
 * Only 127.0.0.1.  The server is started here and stopped at the end. */
#include "llm/llm.h"

#include <curl/curl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static double cpu_now(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static pid_t start_mock(int *port)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execlp("python3", "python3", KH_SOURCE_DIR "/tests/mock_llm.py", "--lifetime", "300",
               (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[64] = "";
    FILE *f = fdopen(fds[0], "r");
    if (!f || !fgets(line, sizeof line, f) || sscanf(line, "%d", port) != 1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    return pid;
}

static size_t discard(char *p, size_t sz, size_t nm, void *ud)
{
    (void)p;
    *(size_t *)ud += sz * nm;
    return sz * nm;
}

static const char *BODY = "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\","
                          "\"content\":\"benchmark prompt\"}]}";

/* The anchor: bare curl multi, n streams, bytes discarded. */
static int run_curl(const char *url, int n, size_t *bytes)
{
    CURLM *m = curl_multi_init();
    CURL **e = calloc((size_t)n, sizeof *e);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (!m || !e || !h)
        return -1;
    for (int i = 0; i < n; i++) {
        e[i] = curl_easy_init();
        if (!e[i] || curl_easy_setopt(e[i], CURLOPT_URL, url) ||
            curl_easy_setopt(e[i], CURLOPT_POSTFIELDS, BODY) ||
            curl_easy_setopt(e[i], CURLOPT_HTTPHEADER, h) ||
            curl_easy_setopt(e[i], CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1) ||
            curl_easy_setopt(e[i], CURLOPT_WRITEFUNCTION, discard) ||
            curl_easy_setopt(e[i], CURLOPT_WRITEDATA, bytes) ||
            curl_multi_add_handle(m, e[i]) != CURLM_OK)
            return -1;
    }
    int running = 1, bad = 0;
    while (running) {
        if (curl_multi_perform(m, &running) != CURLM_OK ||
            curl_multi_poll(m, NULL, 0, 100, NULL) != CURLM_OK)
            return -1;
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)))
        if (msg->msg == CURLMSG_DONE && msg->data.result != CURLE_OK)
            bad++;
    for (int i = 0; i < n; i++) {
        curl_multi_remove_handle(m, e[i]);
        curl_easy_cleanup(e[i]);
    }
    free(e);
    curl_slist_free_all(h);
    curl_multi_cleanup(m);
    return bad;
}

static int run_khlua(const char *base, int n, size_t *bytes)
{
    kh_err err;
    kh_llm *c = kh_llm_new(NULL, &err);
    if (!c)
        return -1;
    json_t *req = json_pack("{s:s, s:s, s:s, s:[{s:s, s:s}]}", "provider", "compat", "model", "m",
                            "base_url", base, "messages", "role", "user", "content",
                            "benchmark prompt");
    for (int i = 0; i < n; i++)
        if (kh_llm_submit(c, req, NULL, &err) != KH_OK) {
            fprintf(stderr, "submit: %s\n", err.msg);
            return -1;
        }
    json_decref(req);
    int done = 0, bad = 0;
    while (done < n) {
        kh_llm_result *rs;
        size_t k;
        if (kh_llm_poll(c, 1, &rs, &k, &err) != KH_OK) {
            fprintf(stderr, "poll: %s\n", err.msg);
            return -1;
        }
        for (size_t i = 0; i < k; i++) {
            if (!json_is_true(json_object_get(rs[i].record, "ok")))
                bad++;
            *bytes += rs[i].raw_len;
            json_decref(rs[i].record);
            free(rs[i].raw);
        }
        free(rs);
        done += (int)k;
    }
    kh_llm_free(c);
    return bad;
}

int main(int argc, char **argv)
{
    int streams = 64, rounds = 3;
    const char *fault = "big";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--streams"))
            streams = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--fault"))
            fault = argv[i + 1];
    }
    if (streams < 1 || rounds < 1) {
        fprintf(stderr, "usage: bench_llm [--streams N] [--rounds N] [--fault ok|big]\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int port;
    pid_t pid = start_mock(&port);
    if (pid < 0) {
        fprintf(stderr, "bench_llm: cannot start the mock server (python3?)\n");
        return 1;
    }
    char base[256], url[300];
    snprintf(base, sizeof base, "http://127.0.0.1:%d/m/%s/0/bench/v1", port, fault);
    snprintf(url, sizeof url, "%s/chat/completions", base);
    double cpu_curl = 0, cpu_kh = 0, wall_curl = 0, wall_kh = 0;
    size_t bytes_curl = 0, bytes_kh = 0;
    int bad = 0;
    for (int r = 0; r < rounds; r++) { /* interleaved, so drift hits both alike */
        double c0 = cpu_now(), w0 = kh_now();
        bad += run_curl(url, streams, &bytes_curl);
        cpu_curl += cpu_now() - c0;
        wall_curl += kh_now() - w0;
        c0 = cpu_now();
        w0 = kh_now();
        bad += run_khlua(base, streams, &bytes_kh);
        cpu_kh += cpu_now() - c0;
        wall_kh += kh_now() - w0;
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    curl_global_cleanup();
    double n = (double)streams * rounds;
    printf("bench_llm: %d streams in flight on one thread x %d rounds, fault=%s, %.0f bytes/stream\n",
           streams, rounds, fault, bytes_kh / n);
    printf("  bare libcurl (anchor): %8.1f us CPU/request  wall %.2f s/round\n",
           cpu_curl / n * 1e6, wall_curl / rounds);
    printf("  khlua kh_llm:          %8.1f us CPU/request  wall %.2f s/round\n",
           cpu_kh / n * 1e6, wall_kh / rounds);
    printf("  ratio khlua/anchor CPU: %.2f   failed requests: %d\n",
           cpu_curl > 0 ? cpu_kh / cpu_curl : 0, bad);
    return bad ? 1 : 0;
}
