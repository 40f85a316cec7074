// Binary trees over ranks, NCCL's layout: in a tree of n ranks numbered 0..n-1, rank v's
// parent clears v's lowest set bit and sets the next one up, so every rank is at most
// log2(n) levels from the root and half the ranks are leaves.
//
//   n = 8:        0
//                 |
//                 4
//              /     \     .
//             2       6
//            / \     / \   .
//           1   3   5   7
//
// The double binary tree gives every rank two roles: the second tree is the first mirrored
// (n even) or shifted by one (n odd), so a leaf of one tree is an inner node of the other and
// both halves of the data keep every link busy.
#pragma once

namespace loom {

struct TreeNode {
  int parent = -1;  // -1 at the root
  int children[2] = {-1, -1};
};

// Rank v's place in the binary tree over 0..n-1 rooted at 0.
TreeNode binaryTree(int n, int v);
// Rank r's place in tree t (0 or 1) of the double binary tree over n ranks.
TreeNode doubleTree(int n, int r, int t);
// Rank r's place in the binary tree rooted at `root` (ranks renumbered from root).
TreeNode rootedTree(int n, int r, int root);

}  // namespace loom
