/* placeholder: syrun is being written */
int main(void) { return 1; }
