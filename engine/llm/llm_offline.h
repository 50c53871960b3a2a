/* llm_offline.h: the providers that need no network (llm_offline.c), for
 * the client loop: agent commands and replays. */
#ifndef KH_LLM_OFFLINE_H
#define KH_LLM_OFFLINE_H

#include "llm/llm_job.h"

/* Start a command job or run a replay job to completion (j->result).  Never
 * fails: problems become an error in the record. */
void llm_offline_run(kh_llm *c, llm_job *j);
/* Running agent commands: the fds to wait on (at most max; returns how many),
 * then pump reads their output, enforces deadlines and finishes those that
 * ended.  kill ends a running command now (cancel, free). */
int llm_command_fds(kh_llm *c, struct curl_waitfd *fds, int max);
void llm_command_pump(llm_job *j);
void llm_command_kill(llm_job *j);

#endif
