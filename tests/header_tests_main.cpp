// SPDX-License-Identifier: Apache-2.0
// Linking every generated header TU together also proves no header defines a
// non-inline symbol (that would be a duplicate definition here).
int main() { return 0; }
