// commands.h — the `ringfire` subcommands. Each takes main's argv and the
// index of its first argument, and returns the process exit code:
// 0 success, 2 bad usage or setup failure, 3 verification failure.
#pragma once

namespace ringfire::cli {

int cmd_create(int argc, char** argv, int first);
int cmd_remove(int argc, char** argv, int first);
int cmd_keygen(int argc, char** argv, int first);
int cmd_publish(int argc, char** argv, int first);
int cmd_tail(int argc, char** argv, int first);
int cmd_stat(int argc, char** argv, int first);
int cmd_top(int argc, char** argv, int first);
int cmd_serve(int argc, char** argv, int first);
int cmd_mirror(int argc, char** argv, int first);
int cmd_compare(int argc, char** argv, int first);
int cmd_run(int argc, char** argv, int first);
int cmd_ctl(int argc, char** argv, int first);
int cmd_mux_consume(int argc, char** argv, int first);
int cmd_mux_produce(int argc, char** argv, int first);
int cmd_record(int argc, char** argv, int first);
int cmd_archive(int argc, char** argv, int first);
int cmd_replay(int argc, char** argv, int first);

class Args;
// tail_archive is `ringfire tail --archive DIR` (cmd_archive.cc).
int tail_archive(const Args& args);

}  // namespace ringfire::cli
