/* `etr validate` compiled without the reader's scan of conforming nodes
 * (ETR_VALIDATE_GENERAL: every node read into its tree and checked there), for
 * test_validate_conform.py to compare with `etr validate`: argv as `etr validate` takes it. */
int cmd_validate(int argc, char **argv);

int main(int argc, char **argv) { return cmd_validate(argc, argv); }
