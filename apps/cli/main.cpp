#include <iostream>
int main() { std::cout << "kiln: under construction\n"; return 0; }
